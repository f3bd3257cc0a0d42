"""One run on many clients: local processes, MPI, and the session that runs trials."""
