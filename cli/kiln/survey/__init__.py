"""Reading live state from nodes over the fleet."""
