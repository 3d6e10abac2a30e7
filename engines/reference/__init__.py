"""The toolkit's own inference engine: `core` (the engine), `serving` (HTTP around it), `loading` (weights
and tokenizers into it). README.md beside this file gives the order to read the modules in."""
