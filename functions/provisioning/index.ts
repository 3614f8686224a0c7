// The provisioning module's functions register here.
