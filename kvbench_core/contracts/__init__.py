"""What plugins build against: hook specs, the backend/source/autoscaler contracts, errors, the registry."""
