/**
 * The functions entry (package.json "main"): the Azure Functions host and the local host both load this file,
 * and every function file registers itself at its bottom. Host functions always register; a module's functions
 * register through `moduleApp(module)`, which honours RuntimeCloud__Host__EnabledModules.
 */
import './host/health';
import './host/targets';
import './host/openapi';
import './host/metrics';
import './host/console';
import './host/outbox-relay';
import './capacity';
import './provisioning';
import './inventory';
