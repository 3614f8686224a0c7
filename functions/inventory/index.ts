// The inventory module's functions register here.
import './inventory-intake';
import './drift-scan';
import './environments';
import './proposals';
