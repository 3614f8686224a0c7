#!/usr/bin/env node
'use strict';
// The local host runs from source through tsx's CommonJS loader; it is a development tool, never deployed.
require('tsx/cjs');
require('../local/cli.ts');
