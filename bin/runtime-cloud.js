#!/usr/bin/env node
'use strict';
// The local host runs from source through tsx's CommonJS loader; it is a development tool, never deployed. Function
// files load some modules on first use by import() of their .js path, as the built app does: tsx's ESM hooks serve
// those from source, so they are registered before the CLI loads.
require('tsx/cjs');
import('tsx/esm').then(
  () => require('../local/cli.ts'),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
