from steadytune.cli import main

raise SystemExit(main())
