"""What a run leaves: the result document, its merge across clients, the environment, trials."""
