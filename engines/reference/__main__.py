"""`python -m engines.reference`: the OpenAI-compatible server, the way the toolkit launches the engine.

The flags are `engines.reference.serving.server.parse_args`'s (`--help` lists them).
"""

from engines.reference.serving.server import main

raise SystemExit(main())
