"""Sources and controls built from a query set (miners, perturbations, controls) and the demo."""

from transferdx.sources import demo as demo  # registers "demo" and "demo_pool" in the inputs registry
