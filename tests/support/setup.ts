import { installFunctionsCore } from '../../local/functions-core/install';

// Every test file sees @azure/functions as the local host does: registrations reach the local registry.
installFunctionsCore();
