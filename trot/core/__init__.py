"""The library's base: what every layer (sim/, tasks/, agents/, export/) may import, and
which imports none of them, nor the app (the CLI, the viewer, the adapters in trot/)."""
