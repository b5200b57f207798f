"""The fleet simulator: many virtual nodes and a site, one asyncio process, the real uplink."""
