from phalanx.cli import main

raise SystemExit(main())
