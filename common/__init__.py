"""Small helpers every package may use: validated input, units in words, child processes. Imports nothing of
the project's other packages."""
