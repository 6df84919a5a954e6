module phalanx.dev/kind/pause

go 1.24
