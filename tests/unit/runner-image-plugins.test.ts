import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { satisfies } from 'semver';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../shared/platform/config/config';

/**
 * The runner image carries the plugins the installation's default package list allows, at versions in its ranges, and
 * never downloads another: the Dockerfile's pins and the default RuntimeCloud__Provisioning__Packages cannot drift
 * apart. (The image itself cannot be built here; docs/security.md, "Packages are the installation's", says what is
 * unverified.)
 */
const DOCKERFILE = readFileSync(join(__dirname, '../../infra/runner/Dockerfile'), 'utf8');

/** The `name@version` pins of the Dockerfile's PULUMI_PLUGINS, by name. */
function imagePins(): Record<string, string> {
  const match = /^ARG PULUMI_PLUGINS="([^"]*)"$/m.exec(DOCKERFILE);
  if (!match?.[1]) throw new Error('infra/runner/Dockerfile has no ARG PULUMI_PLUGINS="name@version ..."');
  return Object.fromEntries(match[1].split(/\s+/).map((pin) => pin.split('@') as [string, string]));
}

describe('the runner image and the default package list', () => {
  it('when the default packages are read, then the image carries each, at a version its range allows, and nothing else', () => {
    // Arrange
    const allowed = parseConfig({}).provisioning.packages;
    const pins = imagePins();

    // Act
    const outOfRange = Object.entries(allowed).filter(([name, range]) => pins[name] === undefined || !satisfies(pins[name], range));

    // Assert
    expect(outOfRange).toEqual([]);
    expect(Object.keys(pins).sort()).toEqual(Object.keys(allowed).sort());
  });

  it('when the image runs, then automatic plugin acquisition is off', () => {
    // Assert: in the final stage's environment, after its last FROM.
    const finalStage = DOCKERFILE.slice(DOCKERFILE.lastIndexOf('\nFROM '));
    expect(finalStage).toMatch(/^ENV [^\n]*(\\\n[^\n]*)*PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true/m);
  });
});
