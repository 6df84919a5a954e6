"""Kind on a machine with no registry: the images the article's demo loads into the cluster (see e2e/kind/README.md)."""
