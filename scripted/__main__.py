"""`python -m scripted`: the scripted server (scripted/server.py), its flags in `--help`."""

from scripted.server import main

main()
