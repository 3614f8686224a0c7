/**
 * What Pulumi's own test harnesses give and expect for the programs we check outputs of: for conformance tests
 * (by test, and `/<step>` for multi-step ones) the config of the test's first run and the stack outputs it asserts
 * (pulumi/pulumi pkg/testing/pulumi-test-language/tests, `l1_*.go`); for pulumi-yaml's integration tests (by
 * `pkg/tests/testdata/<name>`) the config pkg/tests/integration_test.go sets and the outputs it checks. Only
 * expectations that are plain values are here; the other programs' outputs are "not checked".
 */
import type { JsonObject, JsonValue } from '../../shared/platform/iac/iac-values';

export interface KnownExpectation {
  /** Config values by key (project namespace implied), as the test's first run sets them. */
  readonly config?: Readonly<Record<string, JsonValue>>;
  /** Secret config values: given to the engine as `{ secretRef }` and resolved at apply. */
  readonly secrets?: Readonly<Record<string, JsonValue>>;
  /** The stack outputs the test asserts. */
  readonly outputs?: JsonObject;
}

const EXPECTED: Readonly<Record<string, KnownExpectation>> = {
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
  // l1_builtin_file.go (testfile.txt is in the program's folder).
  'l1-builtin-file': {
    outputs: {
      fileContent: 'The quick brown fox jumps over the lazy dog',
      fileB64: 'VGhlIHF1aWNrIGJyb3duIGZveCBqdW1wcyBvdmVyIHRoZSBsYXp5IGRvZw==',
      fileSha: '16j7swfXgJRpypq8sAguT41WUeRtPNt2LQLQvzfJ5ZI=',
    },
  },
  // l1_elide_index.go: a stash's output is its first input.
  'l1-elide-index': { outputs: { stashInput: 'test', stashOutput: 'test' } },
  // l1_builtin_stash.go, run 1 (run 2 keeps run 1's stash, so step 1 alone on a new stack is not that test).
  'l1-builtin-stash/0': { outputs: { stashInput: { key: ['value', 's'], '': false }, stashOutput: { key: ['value', 's'], '': false } } },
  // l2_resource_name_type.go: fn::pulumiResourceName / fn::pulumiResourceType of a simple resource.
  'l2-resource-name-type': { outputs: { name: 'res1', type: 'simple:index:Resource' } },
  // l2_resource_order.go: a resource declared after the one that uses it.
  'l2-resource-order': { outputs: { out: true } },
  // TestResourcePropertiesConfig: `props.length` set to 8 (a path).
  'pkg/tests/testdata/resource-properties-config': { config: { props: { length: 8 } } },
  // TestPropertyAccessOnObjects: `deploymentSettings.githubBranch` set to main; the output `branch` is main.
  'pkg/tests/testdata/property-access-on-objects': { config: { deploymentSettings: { githubBranch: 'main' } }, outputs: { branch: 'main' } },
};

/** The expectation for `key`: `<test>` or `<test>/<step>` of a conformance program, `pkg/tests/testdata/<name>`. */
export function knownExpectation(key: string): KnownExpectation | undefined {
  return EXPECTED[key];
}
