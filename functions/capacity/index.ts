// The capacity module's functions register here.
import './leases';
import './lease-requests';
import './lease-certificates';
import './capacity-admin';
import './lease-expiry-sweep';
import './lease-connect';
