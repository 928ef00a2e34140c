from fedlight.cli import main

raise SystemExit(main())
