// The capacity module's functions register here.
