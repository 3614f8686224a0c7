/**
 * What pulumi-test-language gives and expects for the conformance programs we check outputs of: the config of
 * the test's first run and the stack outputs it asserts (pulumi/pulumi pkg/testing/pulumi-test-language/tests,
 * `l1_*.go`). Only tests whose expectations are plain values are here; the others are "outputs not checked".
 */
import type { JsonObject, JsonValue } from '../../shared/platform/iac/iac-values';

export interface ConformanceExpectation {
  /** Config values by key (project namespace implied), as the test's first run sets them. */
  readonly config?: Readonly<Record<string, JsonValue>>;
  /** Secret config values: given to the engine as `{ secretRef }` and resolved at apply. */
  readonly secrets?: Readonly<Record<string, JsonValue>>;
  /** The stack outputs the test asserts. */
  readonly outputs?: JsonObject;
}

const EXPECTED: Readonly<Record<string, ConformanceExpectation>> = {
  // l1_builtin_base64.go, run 1.
  'l1-builtin-base64': { config: { input: 'aGVsbG8gd29ybGQ=' }, outputs: { data: 'hello world', roundtrip: 'aGVsbG8gd29ybGQ=' } },
  // l1_builtin_info.go: the stack is `test`, the organization `organization`.
  'l1-builtin-info': { outputs: { stackOutput: 'test', projectOutput: 'l1-builtin-info', organizationOutput: 'organization' } },
  // l1_builtin_sha1.go, run 1.
  'l1-builtin-sha1': { config: { input: 'hello world' }, outputs: { hash: '2aae6c35c94fcfb415dbe95f408b9ce91ee846ed' } },
  // l1_builtin_string.go, run 1 (`length` counts grapheme clusters).
  'l1-builtin-string': {
    config: { aString: 'foo-bar-baz' },
    outputs: { lengthResult: 11, splitResult: ['foo', 'bar', 'baz'], joinResult: 'foo|bar|baz', interpolateResult: 'prefix-foo-bar-baz' },
  },
  // l1_builtin_list.go, run 1.
  'l1-builtin-list': {
    config: { aList: ['foo', 'bar', 'baz'], aString: 'foo-bar-baz', singleOrNoneList: ['single'] },
    outputs: { elementOutput1: 'bar', elementOutput2: 'baz', joinOutput: 'foo|bar|baz', lengthOutput: 3, splitOutput: ['foo', 'bar', 'baz'], singleOrNoneOutput: ['single'] },
  },
};

export function conformanceExpectation(test: string): ConformanceExpectation | undefined {
  return EXPECTED[test];
}
