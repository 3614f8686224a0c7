// The inventory module's functions register here.
