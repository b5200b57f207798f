"""Device profiles and register maps as data (JSON), one file per device family."""
