// The capacity module's functions register here.
import './leases';
import './lease-requests';
import './capacity-admin';
import './lease-expiry-sweep';
import './lease-connect';
