"""What a run is asked to do and where: scenarios with flags over them, the host, a model file's shape."""
