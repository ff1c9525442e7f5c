"""harmony_server package."""
