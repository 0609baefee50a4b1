from selector.commands.cli import main

raise SystemExit(main())
