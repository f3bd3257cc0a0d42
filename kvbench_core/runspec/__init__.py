"""From YAML to a validated spec: loading, units, geometry, declaration, redaction, path safety."""
