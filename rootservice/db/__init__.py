"""Storage of the RootService: table definitions, engine set-up and repository functions."""
