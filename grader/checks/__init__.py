"""Hidden and public checks, one module per exercise; importing a module registers its checks."""
