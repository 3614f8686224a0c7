/**
 * The functions entry (package.json "main"): the Azure Functions host and the local host both load this file.
 * The host functions always register; a module's functions register only when RuntimeCloud__Host__EnabledModules
 * names it.
 */
import { getConfig } from './runtime';
import './host/health';
import './host/targets';

const enabled = new Set(getConfig().host.enabledModules);

/* eslint-disable @typescript-eslint/no-require-imports -- registration must depend on configuration */
if (enabled.has('capacity')) require('./capacity');
if (enabled.has('provisioning')) require('./provisioning');
if (enabled.has('inventory')) require('./inventory');
