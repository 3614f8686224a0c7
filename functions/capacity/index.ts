// The capacity module's functions register here.
import './leases';
import './capacity-admin';
import './lease-expiry-sweep';
