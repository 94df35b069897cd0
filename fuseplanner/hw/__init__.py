"""GPU descriptions: datasheet and measured facts per GPU, bundled specs, device detection."""
