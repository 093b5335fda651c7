"""The OpenEnv server package of spyrl's game (see openenv.yaml)."""
