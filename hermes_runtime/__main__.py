from hermes_runtime.cli import main

raise SystemExit(main())
