"""`python -m engines.reference`: the OpenAI-compatible server (same flags as engines.reference.server)."""

from engines.reference.server import main

raise SystemExit(main())
