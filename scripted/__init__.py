"""A server with scripted timing, faults and load, shipped for checking any client (and the capacity search)
against known truth; not part of the load path. `python -m scripted --port 8011 --ttft-ms 100 --itl-ms 20`.

Read in this order: script.py (what it is told), answers.py (what an answer sends and when), streams.py (the
streams in flight and their timer), connection.py (a socket), protocol.py (HTTP and the faults), server.py (the
listener and the command line); provider_play.py is the rate limit and prefix cache it plays as a provider.
"""
