"""Lightning integration (a ``ThunderStrategy`` for the Trainer and Fabric). Not implemented yet."""
