import { describe, expect, it } from 'vitest';
import { thrown } from '../support/refusal';
import { type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';
import { loadProgram, ProgramEvaluator, projectGraph } from '../../local/engine/pulumi-yaml';
import { stdInvoke } from '../../local/engine/std-functions';

/** The Pulumi Standard Library functions the local engine computes for `fn::invoke`, checked against the peer. */

function result(name: string, args: JsonObject): JsonValue {
  const answer = stdInvoke(`std:index:${name}`, args);
  if (answer === undefined || answer === null || typeof answer !== 'object' || Array.isArray(answer)) throw new Error(`std:${name} gave no result object`);
  return (answer as JsonObject).result as JsonValue;
}

/** A logical set, compared without order (main.go's `newSet`). */
type PeerExpectation = JsonValue | { $set: JsonValue[] };

/**
 * pulumi-std's own acceptance test, verbatim: the variable name and arguments from its tests/Pulumi.yaml (each
 * `fn::std:<function>`), the expected value from its tests/main.go `expectedOutputs` (github.com/pulumi/pulumi-std
 * at the fetched HEAD). pulumi-std has no per-function Go unit tests; this program is its published expectation.
 */
const PEER: [string, string, JsonObject, PeerExpectation][] = [
  ['abs-positive', 'abs', {"input": 42.24}, 42.24],
  ['abs-negative', 'abs', {"input": -42.24}, 42.24],
  ['base64encode', 'base64encode', {"input": "ABCDE"}, "QUJDREU="],
  ['base64decode', 'base64decode', {"input": "QUJDREU="}, "ABCDE"],
  ['basename', 'basename', {"input": "path/to/pulumi"}, "pulumi"],
  ['base64sha256', 'base64sha256', {"input": "abc"}, "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="],
  ['base64sha512', 'base64sha512', {"input": "abc"}, "3a81oZNherrMQXNJriBBMRLm+k6JqX6iCp7u5ktV05ohkpkqJ0/BqDa6PCOj/uu9RU1EI2Q86A4qmslPpUyknw=="],
  ['chunklist', 'chunklist', {"input": [1, 2, 3, 4, 5], "size": 2}, [[1, 2], [3, 4], [5]]],
  ['chunklistByOne', 'chunklist', {"input": [1, 2, 3, 4, 5], "size": 1}, [[1], [2], [3], [4], [5]]],
  ['cidrhost', 'cidrhost', {"input": "10.0.0.0/8", "host": 2}, "10.0.0.2"],
  ['cidrhostV2', 'cidrhost', {"input": "10.0.0.0/8", "host": -2}, "10.255.255.254"],
  ['cidrnetmask', 'cidrnetmask', {"input": "10.0.0.0/8"}, "255.0.0.0"],
  ['cidrsubnet', 'cidrsubnet', {"input": "10.0.0.0/8", "newbits": 8, "netnum": 2}, "10.2.0.0/16"],
  ['cidrsubnetsEmpty', 'cidrsubnets', {"input": "10.0.0.0/8", "newbits": []}, []],
  ['cidrsubnetsSingle', 'cidrsubnets', {"input": "10.0.0.0/8", "newbits": [1]}, ["10.0.0.0/9"]],
  ['cidrsubnetsBasic', 'cidrsubnets', {"input": "10.1.0.0/16", "newbits": [4, 4, 8, 4]}, ["10.1.0.0/20", "10.1.16.0/20", "10.1.32.0/24", "10.1.48.0/20"]],
  ['cidrsubnetsIpv6', 'cidrsubnets', {"input": "fd00:fd12:3456:7890::/56", "newbits": [16, 16, 16, 32]}, ["fd00:fd12:3456:7800::/72", "fd00:fd12:3456:7800:100::/72", "fd00:fd12:3456:7800:200::/72", "fd00:fd12:3456:7800:300::/88"]],
  ['coalesce', 'coalesce', {"input": ["hello", "world"]}, "hello"],
  ['coalesceWithNil', 'coalesce', {"input": [null, "hello", "world"]}, "hello"],
  ['coalesceWithInts', 'coalesce', {"input": [1, 2, 3]}, 1],
  ['coalesceWithIntsAndFloats', 'coalesce', {"input": [1, 2.0, null, 3, null]}, 1.0],
  ['coalesceWithFloatsAndStrings', 'coalesce', {"input": [null, 1.0, "hello"]}, "1"],
  ['coalesceWithIntsAndStrings', 'coalesce', {"input": [null, 1, "hello"]}, "1"],
  ['coalesceWithBoolsAndStrings', 'coalesce', {"input": [true, null, "hello"]}, "true"],
  ['coalescelistWithNonEmptyFirst', 'coalescelist', {"input": [[1], [], [2]]}, [1]],
  ['coalescelistWithNonEmptySecond', 'coalescelist', {"input": [[], [1], [2]]}, [1]],
  ['compact', 'compact', {"input": ["", "one", "", null]}, ["one"]],
  ['compactMixed', 'compact', {"input": ["", "one", "", null, "two"]}, ["one", "two"]],
  ['compactMixedEmpty', 'compact', {"input": ["", "", null]}, []],
  ['compactNullsEmpty', 'compact', {"input": [null, null]}, []],
  ['concat', 'concat', {"input": [[1, 2], [3, 4], [5]]}, [1, 2, 3, 4, 5]],
  ['containsWithBooleansYes', 'contains', {"input": [false, false, true, false, false], "element": true}, true],
  ['containsWithBooleansNo', 'contains', {"input": [false, false, false, false], "element": true}, false],
  ['containsWithIntegersYes', 'contains', {"input": [1, 2, 3, 4, 5], "element": 1}, true],
  ['containsWithIntegersNo', 'contains', {"input": [1, 2, 3, 4, 5], "element": 10}, false],
  ['containsWithStringsYes', 'contains', {"input": ["one", "two", "three"], "element": "two"}, true],
  ['containsWithStringsNo', 'contains', {"input": ["one", "two", "three"], "element": "four"}, false],
  ['containsWithListsYes', 'contains', {"input": [[1], [2], [3]], "element": [2]}, true],
  ['containsWithListsNo', 'contains', {"input": [[1], [2], [3]], "element": []}, false],
  ['csvdecode', 'csvdecode', {"input": "a,b,c\n 1,2, 3\n 4, 5,6"}, [{"a": "1", "b": "2", "c": "3"}, {"a": "4", "b": "5", "c": "6"}]],
  ['shouldNotContain', 'contains', {"input": [1, 2, 3], "element": 5}, false],
  ['dirname', 'dirname', {"input": "/path/to/directory/file.txt"}, "/path/to/directory"],
  ['distinctWithBooleans', 'distinct', {"input": [true, false, true, true, false, true, false]}, [true, false]],
  ['distinctWithIntegers', 'distinct', {"input": [1, 2, 2, 3, 3, 4, 5]}, [1, 2, 3, 4, 5]],
  ['distinctWithStrings', 'distinct', {"input": ["one", "two", "two", "two", "three"]}, ["one", "two", "three"]],
  ['element', 'element', {"input": [10, 20, 30], "index": 1}, 20],
  ['elementOverflow', 'element', {"input": [10, 20, 30], "index": 3}, 10],
  ['elementNegativeIndex', 'element', {"input": [10, 20, 30], "index": -1}, 30],
  ['flatten', 'flatten', {"input": [[[1]], [[[2, 3, 4]]], [5]]}, [1, 2, 3, 4, 5]],
  ['flattenWithStrings', 'flatten', {"input": [[["one"]], [[["two", "three", "four"]]], ["five"]]}, ["one", "two", "three", "four", "five"]],
  ['floor', 'floor', {"input": 1.1}, 1.0],
  ['formatPercent', 'format', {"input": "hello-%%-%s", "args": ["world"]}, "hello-%-world"],
  ['formatValues', 'format', {"input": "hello-%v-%v-%v-%v-%v", "args": [42, "hello", true, [1, 2, 3], {"hello": "world"}]}, "hello-42-hello-true-[1,2,3]-{\"hello\":\"world\"}"],
  ['formatJSONs', 'format', {"input": "hello-%#v-%#v-%#v-%#v-%#v", "args": [42, "hello", true, [1, 2, 3], {"hello": "world"}]}, "hello-42-\"hello\"-true-[1,2,3]-{\"hello\":\"world\"}"],
  ['formatBooleans', 'format', {"input": "hello-%t-%t", "args": [true, false]}, "hello-true-false"],
  ['formatIntegersBinary', 'format', {"input": "hello-%b-%b", "args": [42, 5]}, "hello-101010-101"],
  ['formatIntegersDecimal', 'format', {"input": "hello-%d-%d", "args": [42, 5]}, "hello-42-5"],
  ['formatIntegersOctal', 'format', {"input": "hello-%o-%o", "args": [42, 5]}, "hello-52-5"],
  ['formatIntegersHexLower', 'format', {"input": "hello-%x-%x", "args": [42, 13]}, "hello-2a-d"],
  ['formatIntegersHexUpper', 'format', {"input": "hello-%X-%X", "args": [42, 13]}, "hello-2A-D"],
  ['formatFloatsScientificLower', 'format', {"input": "hello-%e-%e", "args": [42000042.42, 13.13]}, "hello-4.200004e+07-1.313000e+01"],
  ['formatFloatsScientificUpper', 'format', {"input": "hello-%E-%E", "args": [42000042.42, 13.13]}, "hello-4.200004E+07-1.313000E+01"],
  ['formatFloatsDecimal', 'format', {"input": "hello-%f-%f", "args": [42000042.42, 13.13]}, "hello-42000042.420000-13.130000"],
  ['formatFloatsGeneralLower', 'format', {"input": "hello-%g-%g", "args": [42000042.42, 13.13]}, "hello-4.200004242e+07-13.13"],
  ['formatFloatsGeneralUpper', 'format', {"input": "hello-%G-%G", "args": [42000042.42, 13.13]}, "hello-4.200004242E+07-13.13"],
  ['formatStrings', 'format', {"input": "hello-%s-%s", "args": ["world", "hello"]}, "hello-world-hello"],
  ['formatQuotedStrings', 'format', {"input": "hello-%q-%q", "args": ["world", "hello"]}, "hello-\"world\"-\"hello\""],
  ['formatlistInputOnly', 'formatlist', {"input": "hello", "args": []}, ["hello"]],
  ['formatlistEmptySingle', 'formatlist', {"input": "hello %s", "args": [[]]}, []],
  ['formatlistEmptyMultiple', 'formatlist', {"input": "hello %s %d %s", "args": [[], 32, []]}, []],
  ['formatlistScalars', 'formatlist', {"input": "hello %s %d %s", "args": ["world", 32, "hello"]}, ["hello world 32 hello"]],
  ['formatlistLists', 'formatlist', {"input": "hello %s %d %s", "args": [["foo", "bar"], [13, 46], ["baz", "quux"]]}, ["hello foo 13 baz", "hello bar 46 quux"]],
  ['formatlistMixed', 'formatlist', {"input": "hello %s %d %s", "args": [["foo", "bar"], 32, ["baz", "quux"]]}, ["hello foo 32 baz", "hello bar 32 quux"]],
  ['index', 'index', {"input": ["one", "two", "three"], "element": "two"}, 1],
  ['join', 'join', {"input": ["one", "two", "three"], "separator": "-"}, "one-two-three"],
  ['jsonencode', 'jsonencode', {"input": {"hello": "world"}}, "{\"hello\":\"world\"}"],
  ['jsondecode', 'jsondecode', {"input": "{\"str\": \"hello\", \"num\":6.13,\"strs\":[\"a\",\"b\"], \"bool\": true}"}, {"str": "hello", "num": 6.13, "strs": ["a", "b"], "bool": true}],
  ['keysEmpty', 'keys', {"input": {}}, []],
  ['keysNonEmpty', 'keys', {"input": {"hello": "world", "one": "two"}}, ["hello", "one"]],
  ['log', 'log', {"input": 8, "base": 2}, 3.0],
  ['md5', 'md5', {"input": "abc"}, "900150983cd24fb0d6963f7d28e17f72"],
  ['slice', 'slice', {"list": [1, 2, 3], "from": 0, "to": 3}, [1, 2, 3]],
  ['parseint', 'parseint', {"input": "100"}, 100],
  ['parseintWithBase', 'parseint', {"input": "FF", "base": 16}, 255],
  ['regexNoGroup', 'regex', {"pattern": "a[a-z]+b", "string": "athentextb athenmoretextb"}, "athentextb"],
  ['regexNoMatch', 'regex', {"pattern": "a.*b", "string": "asdfsdfsdfdsf"}, []],
  ['regexNumberedGroups', 'regex', {"pattern": "([0-9])([0-9])", "string": "1234"}, ["1", "2"]],
  ['regexNamedGroups', 'regex', {"pattern": "(?P<first>[0-9])(?P<second>[0-9])", "string": "1234"}, {"first": "1", "second": "2"}],
  ['regexallNoGroup', 'regexall', {"pattern": "a[a-z]+b", "string": "athentextb athenmoretextb"}, ["athentextb", "athenmoretextb"]],
  ['regexallNoMatch', 'regexall', {"pattern": "a.*b", "string": "asdfsdfsdfdsf"}, []],
  ['regexallNumberedGroups', 'regexall', {"pattern": "([0-9])([0-9])", "string": "1234"}, [["1", "2"], ["3", "4"]]],
  ['regexallNamedGroups', 'regexall', {"pattern": "(?P<first>[0-9])(?P<second>[0-9])", "string": "1234"}, [{"first": "1", "second": "2"}, {"first": "3", "second": "4"}]],
  ['reverse', 'reverse', {"input": [true, 1, "foo"]}, ["foo", 1, true]],
  ['range', 'range', {"limit": 3}, [0, 1, 2]],
  ['rangeStartLimit', 'range', {"start": 1, "limit": 4}, [1, 2, 3]],
  ['rangeStartLimitStep', 'range', {"start": 1, "limit": 8, "step": 2}, [1, 3, 5, 7]],
  ['rangeStartLimitStepDecimal', 'range', {"limit": 4, "start": 1, "step": 0.5}, [1, 1.5, 2, 2.5, 3, 3.5]],
  ['rangeStartLimitDecline', 'range', {"limit": 1, "start": 4}, [4, 3, 2]],
  ['rangeStartLimitStepDecline', 'range', {"start": 10, "limit": 5, "step": -2}, [10, 8, 6]],
  ['sort', 'sort', {"input": ["apple", "Avocado", "pear", "Orange", "banana", "orange", "watermelon"]}, ["Avocado", "Orange", "apple", "banana", "orange", "pear", "watermelon"]],
  ['startswith', 'startswith', {"input": "hello", "prefix": "he"}, true],
  ['endswith', 'endswith', {"input": "hello", "suffix": "llo"}, true],
  ['values', 'values', {"input": {"one": 1, "two": 2}}, [1, 2]],
  ['setintersectionEmpty', 'setintersection', {"input": []}, {"$set": []}],
  ['setintersectionSingle', 'setintersection', {"input": [["a", "b", "c"]]}, {"$set": ["a", "b", "c"]}],
  ['setintersectionStrings', 'setintersection', {"input": [["a", "b", "c"], ["a", "b"], ["a", "d", "e"]]}, {"$set": ["a"]}],
  ['setintersectionBools', 'setintersection', {"input": [[true, false], [true]]}, {"$set": [true]}],
  ['setintersectionIntegers', 'setintersection', {"input": [[1, 2, 3], [2, 3], [3, 4, 5]]}, {"$set": [3]}],
  ['setintersectionFloats', 'setintersection', {"input": [[1.1, 2.2, 3.3], [2.2, 3.3], [3.3, 4.4, 5.5]]}, {"$set": [3.3]}],
  ['setintersectionIntsAndFloats', 'setintersection', {"input": [[1.1, 2.2, 3], [2.2, 3], [2.2, 3.0, 4.4, 5.5]]}, {"$set": [2.2, 3.0]}],
  ['setintersectionMixed', 'setintersection', {"input": [["bob", true, "jane", 3], ["jane", 3.0, "ajax", 10, "true"], [true, "3", "jane", 26, "nomad"]]}, {"$set": ["jane", "3", "true"]}],
  ['split', 'split', {"separator": ",", "text": "one,two,three"}, ["one", "two", "three"]],
  ['strrev', 'strrev', {"input": "hello"}, "olleh"],
  ['substr', 'substr', {"input": "hello world", "offset": 0, "length": 5}, "hello"],
  ['transpose', 'transpose', {"input": {"a": ["1", "2"], "b": ["2", "3"]}}, {"1": ["a"], "2": ["a", "b"], "3": ["b"]}],
  ['title', 'title', {"input": "hello world"}, "Hello World"],
  ['toboolBool', 'tobool', {"input": true}, true],
  ['toboolStr', 'tobool', {"input": "false"}, false],
  ['tolist', 'tolist', {"input": ["a", true, 3.14]}, ["a", "true", "3.14"]],
  ['toset', 'toset', {"input": ["a", true, 3.14, "a", 3.14]}, ["a", "true", "3.14"]],
  ['tonumberInt', 'tonumber', {"input": 3}, 3],
  ['tonumberFloat', 'tonumber', {"input": 3.14159}, 3.14159],
  ['tonumberStr', 'tonumber', {"input": "10"}, 10],
  ['tostringStr', 'tostring', {"input": "hello world"}, "hello world"],
  ['tostringInt', 'tostring', {"input": 8}, "8"],
  ['tostringFloat', 'tostring', {"input": 1.234}, "1.234"],
  ['tostringBool', 'tostring', {"input": true}, "true"],
  ['trim', 'trim', {"input": " Hello  World!$ ", "cutset": "a$ "}, "Hello  World!"],
  ['trimprefix', 'trimprefix', {"input": "foo bar", "prefix": "foo"}, " bar"],
  ['trimsuffix', 'trimsuffix', {"input": "foo bar", "suffix": "bar"}, "foo "],
  ['trimspace', 'trimspace', {"input": "  foobar\t\n "}, "foobar"],
  ['urlencode', 'urlencode', {"input": "Hello World!"}, "Hello+World%21"],
  ['upper', 'upper', {"input": "one"}, "ONE"],
  ['alltrue', 'alltrue', {"input": [true, "true", true]}, true],
  ['anytrue', 'anytrue', {"input": [false, "true", false]}, true],
  ['sum', 'sum', {"input": [1, 2, 3, 4, 5]}, 15],
  ['zipmap', 'zipmap', {"keys": ["one", "two", "three"], "values": [1, 2, 3]}, {"one": 1, "two": 2, "three": 3}],
];

/**
 * Cases beyond the peer's acceptance program, first of all for the 17 functions it does not call. Where the row is
 * named like a Terraform call it follows the examples of Terraform's function reference, which pulumi-std ports
 * (developer.hashicorp.com/terraform/language/functions/<name>; recalled, not copied, so a few arguments differ);
 * the digests are the FIPS 180-2 "abc" test vectors; `map`, `matchkeys`, `indent`, `length` and the padded `format`
 * row are worked out by hand from the Go source named (provider/<name>.go), not published by anyone.
 */
const DOCUMENTED: [string, string, JsonObject, JsonValue][] = [
  ['ceil(5.1)', 'ceil', { input: 5.1 }, 6],
  ['ceil(5)', 'ceil', { input: 5 }, 5],
  ['chomp("hello\\n")', 'chomp', { input: 'hello\n' }, 'hello'],
  ['chomp("hello\\r\\n")', 'chomp', { input: 'hello\r\n' }, 'hello'],
  ['chomp("hello\\n\\n")', 'chomp', { input: 'hello\n\n' }, 'hello'],
  ['indent(2, "[\\n  foo,\\n  bar,\\n]\\n")', 'indent', { input: '[\n  foo,\n  bar,\n]\n', spaces: 2 }, '[\n    foo,\n    bar,\n  ]\n  '],
  ['length([])', 'length', { input: [] }, 0],
  ['length(["a", "b"])', 'length', { input: ['a', 'b'] }, 2],
  ['length({"a" = "b"})', 'length', { input: { a: 'b' } }, 1],
  ['length("hello")', 'length', { input: 'hello' }, 5],
  ['lookup({a="ay", b="bee"}, "a", "what?")', 'lookup', { map: { a: 'ay', b: 'bee' }, key: 'a', default: 'what?' }, 'ay'],
  ['lookup({a="ay", b="bee"}, "c", "what?")', 'lookup', { map: { a: 'ay', b: 'bee' }, key: 'c', default: 'what?' }, 'what?'],
  ['lower("HELLO")', 'lower', { input: 'HELLO' }, 'hello'],
  ['max(12, 54, 3)', 'max', { input: [12, 54, 3] }, 54],
  ['min(12, 54, 3)', 'min', { input: [12, 54, 3] }, 3],
  ['merge({a="b", c="d"}, {e="f", c="z"})', 'merge', { input: [{ a: 'b', c: 'd' }, { e: 'f', c: 'z' }] }, { a: 'b', c: 'z', e: 'f' }],
  ['pow(3, 2)', 'pow', { base: 3, exponent: 2 }, 9],
  ['pow(4, 0)', 'pow', { base: 4, exponent: 0 }, 1],
  ['replace("1 + 2 + 3", "+", "-")', 'replace', { text: '1 + 2 + 3', search: '+', replace: '-' }, '1 - 2 - 3'],
  ['replace("hello world", "/w.*d/", "everybody")', 'replace', { text: 'hello world', search: '/w.*d/', replace: 'everybody' }, 'hello everybody'],
  ['signum(-13)', 'signum', { input: -13 }, -1],
  ['signum(0)', 'signum', { input: 0 }, 0],
  ['signum(344)', 'signum', { input: 344 }, 1],
  ['sha1("abc") (FIPS 180-2)', 'sha1', { input: 'abc' }, 'a9993e364706816aba3e25717850c26c9cd0d89d'],
  ['sha256("abc") (FIPS 180-2)', 'sha256', { input: 'abc' }, 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'],
  ['sha512("abc") (FIPS 180-2)', 'sha512', { input: 'abc' }, 'ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f'],
  ['map("a", 1, "b", 2) (map.go)', 'map', { args: ['a', 1, 'b', 2] }, { a: 1, b: 2 }],
  ['matchkeys with no values (matchkeys.go: its keys field is unexported, so always empty)', 'matchkeys', { values: [], searchList: ['a'] }, []],
  ['cidrsubnet("172.16.0.0/12", 4, 2)', 'cidrsubnet', { input: '172.16.0.0/12', newbits: 4, netnum: 2 }, '172.18.0.0/16'],
  ['cidrsubnet("fd00:fd12:3456:7890::/56", 16, 162)', 'cidrsubnet', { input: 'fd00:fd12:3456:7890::/56', newbits: 16, netnum: 162 }, 'fd00:fd12:3456:7800:a200::/72'],
  ['cidrhost("fd00:fd12:3456:7890:00a2::/72", 7)', 'cidrhost', { input: 'fd00:fd12:3456:7890:00a2::/72', host: 7 }, 'fd00:fd12:3456:7890::7'],
  ['cidrsubnets("10.1.0.0/16", 4, 4, 8, 4)', 'cidrsubnets', { input: '10.1.0.0/16', newbits: [4, 4, 8, 4] }, ['10.1.0.0/20', '10.1.16.0/20', '10.1.32.0/24', '10.1.48.0/20']],
  ['title("hello world")', 'title', { input: 'hello world' }, 'Hello World'],
  ['format("Hello, %s!", "Ander")', 'format', { input: 'Hello, %s!', args: ['Ander'] }, 'Hello, Ander!'],
  ['format("There are %d lights", 4)', 'format', { input: 'There are %d lights', args: [4] }, 'There are 4 lights'],
  ['format("%-5s|%5d|%05.1f", "ab", 42, 3.14159)', 'format', { input: '%-5s|%5d|%05.1f', args: ['ab', 42, 3.14159] }, 'ab   |   42|003.1'],
  ['formatlist("Hello, %s!", ["Valentina", "Ander", "Olivia", "Sam"])', 'formatlist', { input: 'Hello, %s!', args: [['Valentina', 'Ander', 'Olivia', 'Sam']] }, ['Hello, Valentina!', 'Hello, Ander!', 'Hello, Olivia!', 'Hello, Sam!']],
  ['basename("foo/bar/baz.txt")', 'basename', { input: 'foo/bar/baz.txt' }, 'baz.txt'],
  ['dirname("foo/bar/baz.txt")', 'dirname', { input: 'foo/bar/baz.txt' }, 'foo/bar'],
  ['urlencode("foo:bar@localhost?foo=bar&bar=baz")', 'urlencode', { input: 'foo:bar@localhost?foo=bar&bar=baz' }, 'foo%3Abar%40localhost%3Ffoo%3Dbar%26bar%3Dbaz'],
  ['split(",", "foo")', 'split', { separator: ',', text: 'foo' }, ['foo']],
  ['substr("🤔🤷", 0, 1)', 'substr', { input: '🤔🤷', offset: 0, length: 1 }, '🤔'],
  ['substr("hello world", -5, -1)', 'substr', { input: 'hello world', offset: -5, length: -1 }, 'world'],
  ['strrev("a ☃")', 'strrev', { input: 'a ☃' }, '☃ a'],
  ['regex("[a-z]+", "53453453.345345aaabbbccc23454")', 'regex', { pattern: '[a-z]+', string: '53453453.345345aaabbbccc23454' }, 'aaabbbccc'],
  ['trimspace("  hello\\n\\n")', 'trimspace', { input: '  hello\n\n' }, 'hello'],
  ['trim("?!hello?!", "!?")', 'trim', { input: '?!hello?!', cutset: '!?' }, 'hello'],
  ['jsonencode({"hello"="world"})', 'jsonencode', { input: { hello: 'world' } }, '{"hello":"world"}'],
  ['element(["a", "b", "c"], 3)', 'element', { input: ['a', 'b', 'c'], index: 3 }, 'a'],
];

function comparable(value: JsonValue | undefined, expected: PeerExpectation): [unknown, unknown] {
  if (expected !== null && typeof expected === 'object' && !Array.isArray(expected) && '$set' in expected) {
    const sorted = (list: unknown) => (Array.isArray(list) ? list.map((v) => JSON.stringify(v)).sort() : list);
    return [sorted(value), sorted(expected.$set)];
  }
  return [value, expected];
}

describe('std functions: the peer\'s acceptance program (pulumi-std tests/Pulumi.yaml, tests/main.go)', () => {
  it.each(PEER)('when %s calls std:%s with %j, then the result is the peer\'s expected value', (_name, fn, args, expected) => {
    const [actual, wanted] = comparable(result(fn, args), expected);
    expect(actual).toEqual(wanted);
  });
});

describe('std functions: the documented examples of functions the peer\'s program does not call', () => {
  it.each(DOCUMENTED)('when %s, then the result is the documented value', (_name, fn, args, expected) => {
    expect(result(fn, args)).toEqual(expected);
  });
});

describe('std functions: what pulumi-std computes beyond the examples (ported from provider/<name>.go)', () => {
  it('when format meets a verb its value does not take, a missing or an extra argument, then it prints what Go\'s fmt prints', () => {
    expect(result('format', { input: '%d|%s|%e', args: ['x', 1, 2] })).toBe('%!d(string=x)|%!s(int64=1)|%!e(int64=2)');
    expect(result('format', { input: '%s %s', args: ['a'] })).toBe('a %!s(MISSING)');
    expect(result('format', { input: '%s', args: ['a', 1] })).toBe('a%!(EXTRA int64=1)');
    expect(result('format', { input: '%.2f %x %q %#x %+d', args: [2.005, 'hi', 'a"b', 255, 3] })).toBe('2.00 6869 "a\\"b" 0xff +3');
  });

  it('when format is asked for what the port cannot print as Go does, then it fails rather than print something else', () => {
    expect(thrown(() => result('format', { input: '%[1]s', args: ['a'] })).message).toContain('argument indexes ([n]) and * widths are not supported');
    expect(thrown(() => result('format', { input: '%*d', args: [3, 1] })).details).toMatchObject({ argument: 'input' });
    expect(thrown(() => result('format', { input: '%x', args: [1.5] })).message).toContain('%x of a fractional number');
    expect(thrown(() => result('format', { input: '%99999d', args: [1] })).message).toContain('widths and precisions above 10000');
    expect(thrown(() => result('format', { input: '%.200f', args: [1.5] })).message).toContain('float precisions above 100');
    expect(result('format', { input: '%.1f|%.3g|%g', args: [1e22 + 0.5, 1234.5678, 0.000012] })).toBe('10000000000000000000000.0|1.23e+03|1.2e-05');
    expect(result('format', { input: '%q|%U|%c', args: ['\u0001\u0007', 65, 65] })).toBe('"\\x01\\a"|U+0041|A');
  });

  it('when a plan would need unbounded time or memory, then the function fails instead (range, indent, substr offsets)', () => {
    expect(thrown(() => result('range', { limit: 1e9 })).message).toContain('more than 1000000 numbers');
    expect(thrown(() => result('indent', { input: 'a', spaces: 1e7 })).details).toMatchObject({ argument: 'spaces' });
    expect(result('substr', { input: 'hello', offset: -1e15 - 2, length: 2 })).toBe('lo');
  });

  it('when text changes case, then each character maps on its own, as strings.ToUpper/ToLower do', () => {
    expect(result('upper', { input: 'straße' })).toBe('STRAßE');
    expect(result('lower', { input: 'ΣΑΣ İ' })).toBe('σασ i');
  });

  it('when numbers are printed as text, then they read as Go prints a float64 (%v)', () => {
    expect(result('tostring', { input: 1000000 })).toBe('1e+06');
    expect(result('tostring', { input: 0.00001 })).toBe('1e-05');
    expect(result('tostring', { input: 123456 })).toBe('123456');
    expect(result('tolist', { input: [1, 2] })).toEqual(['1', '2']);
  });

  it('when replace uses a regular expression, then $1 and ${name} expand as Go\'s ReplaceAllString does', () => {
    expect(result('replace', { text: 'a1 b2', search: '/([a-z])(\\d)/', replace: '$2$1' })).toBe('1a 2b');
    expect(result('replace', { text: 'a1', search: '/(?P<l>[a-z])(?P<d>\\d)/', replace: '${d}-${l}' })).toBe('1-a');
    expect(result('replace', { text: 'a1', search: '/([a-z])/', replace: '$1x' })).toBe('1');
  });

  it('when a pattern uses RE2 syntax, then it means what it means in Go, and what RE2 rejects is an error', () => {
    expect(result('regex', { pattern: '[[:digit:]]+', string: 'ab12c' })).toBe('12');
    expect(result('regex', { pattern: '\\pL+', string: '12éa3' })).toBe('éa');
    expect(result('regex', { pattern: '\\Aab\\z', string: 'ab' })).toBe('ab');
    expect(result('regex', { pattern: '[]a]+', string: 'x]a]' })).toBe(']a]');
    expect(result('regexall', { pattern: '\\s', string: 'a\u00a0b c' })).toEqual([' ']);
    expect(result('regex', { pattern: '(?i)HELLO', string: 'say hello' })).toBe('hello');
    for (const pattern of ['(a)\\1', '(?=a)', '(?<!a)b', '(?U)a+']) {
      expect(thrown(() => result('regex', { pattern, string: 'aa' }))).toMatchObject({ code: 'IAC.INVALID_FUNCTION', details: { argument: 'pattern' } });
    }
  });

  it('when an optional result is nil upstream (tostring/tobool/tonumber of null), then the answer has no result field', () => {
    expect(stdInvoke('std:index:tostring', { input: null })).toEqual({});
    expect(stdInvoke('std:index:tobool', { input: null })).toEqual({});
  });

  it('when a function answers an empty map, then it is still the result', () => {
    expect(stdInvoke('std:index:merge', { input: [] })).toEqual({ result: {} });
    expect(stdInvoke('std:index:jsondecode', { input: '{}' })).toEqual({ result: {} });
  });

  it('when jsondecode is given anything but an object, then it answers the text, as upstream decodes only into a map', () => {
    expect(result('jsondecode', { input: '[1,2]' })).toBe('[1,2]');
    expect(result('jsondecode', { input: 'null' })).toBeNull();
  });

  it('when an argument is not yet known, then the result is unknown rather than computed from a placeholder', () => {
    const answer = stdInvoke('std:index:upper', { input: { 'fn::computed': '${bucket.id}' } });
    expect(answer).toMatchObject({ 'fn::computed': expect.stringContaining('std:index:upper') as unknown });
  });
});

describe('std functions: what is refused', () => {
  // A plan must be reproducible (no clocks, randomness or salts) and a tenant's program may not read the host.
  it.each(['timestamp', 'uuid', 'bcrypt', 'rsadecrypt', 'file', 'filebase64', 'filemd5', 'filesha256', 'fileexists', 'pathexpand', 'abspath'])(
    'when std:%s is invoked, then there is no answer, so the plan fails UNSUPPORTED naming it',
    (name) => {
      expect(stdInvoke(`std:index:${name}`, { input: 'x' })).toBeUndefined();
    },
  );

  it('when the token is not a std function, then there is no answer', () => {
    expect(stdInvoke('aws:index:getAmi', { input: 1 })).toBeUndefined();
    expect(stdInvoke('std:index:nosuch', {})).toBeUndefined();
    expect(stdInvoke('std:index:toString', { input: 1 })).toBeUndefined();
    expect(stdInvoke('std:index:constructor', {})).toBeUndefined();
  });
});

describe('std functions: bad arguments', () => {
  it.each<[string, JsonObject, string, string | undefined]>([
    ['abs', {}, "argument 'input': is required", 'input'],
    ['abs', { input: 1, inptu: 2 }, "argument 'inptu': is not an argument of this function", 'inptu'],
    ['matchkeys', { values: [], keys: [], searchList: [] }, "argument 'keys': is not an argument of this function", 'keys'],
    ['abs', { input: 'x' }, "argument 'input': must be a number, not a string", 'input'],
    ['upper', { input: 3 }, "argument 'input': must be a string, not a number", 'input'],
    ['join', { input: ['a', 1], separator: '-' }, 'must be a list of strings, found a number at index 1', 'input'],
    ['chunklist', { input: [1], size: 1.5 }, "argument 'size': must be an integer, not 1.5", 'size'],
    ['chunklist', { input: [1], size: -1 }, 'size must be greater than or equal to 0', 'size'],
    ['keys', { input: [] }, "argument 'input': must be an object, not a list", 'input'],
    ['max', { input: [] }, 'input list must not be empty', undefined],
    ['element', { input: [], index: 0 }, 'input list must not be empty when using the element function', undefined],
    ['index', { input: ['a'], element: 'b' }, 'item not found', undefined],
    ['lookup', { map: {}, key: 'k' }, 'key not found in input map', undefined],
    ['coalesce', { input: [null, ''] }, 'no non-empty values found', undefined],
    ['coalesce', { input: [true, 1] }, 'all arguments must be convertible to the same type', undefined],
    ['coalescelist', { input: [[], []] }, 'no non-empty list found', undefined],
    ['compact', { input: ['a', 1] }, 'compact arg is not a string value', undefined],
    ['zipmap', { keys: ['a'], values: [] }, 'keys and values must be the same length', undefined],
    ['map', { args: ['a'] }, 'expected an even number of arguments', undefined],
    ['slice', { list: [1, 2], from: 3 }, 'from index out of range', 'from'],
    ['parseint', { input: '12', base: 1 }, 'base must be between 2 and 62 inclusive', 'base'],
    ['parseint', { input: 'zz', base: 10 }, 'strconv.ParseInt: parsing "zz": invalid syntax', 'input'],
    ['tonumber', { input: 'ten' }, 'ten is not a number value', 'input'],
    ['tobool', { input: 'yes' }, 'yes is not a boolean value', 'input'],
    ['tostring', { input: ['a', 'b'] }, '[a b] is not a string value', 'input'],
    ['length', { input: 3 }, 'input must be a string, list, or map', 'input'],
    ['base64decode', { input: 'QUJ' }, 'failed to decode base64 data', 'input'],
    ['csvdecode', { input: 'a,b\n1' }, 'Invalid input: each line must contain the same number of fields', undefined],
    ['regex', { pattern: '(?P<a>x)(y)', string: 'xy' }, 'regex pattern contains a mix of named and unnamed submatches, must be all named or all unnamed', undefined],
    ['regex', { pattern: '(', string: 'x' }, 'error parsing regexp', 'pattern'],
    ['formatlist', { input: '%s %s', args: [['a'], ['b', 'c']] }, 'all list arguments must be of the same length', undefined],
    ['log', { input: 0, base: 10 }, 'is not a finite number', undefined],
    ['matchkeys', { values: ['a'], searchList: ['a'] }, 'values and keys must be of equal length', undefined],
    ['cidrhost', { input: '10.0.0.0', host: 1 }, 'invalid CIDR expression: invalid CIDR address: 10.0.0.0', 'input'],
    ['cidrhost', { input: '10.0.0.0/30', host: 4 }, 'prefix of 30 does not accommodate a host numbered 4', undefined],
    ['cidrnetmask', { input: 'fd00::/8' }, 'IPv6 addresses cannot have a netmask: fd00::/8', 'input'],
    ['cidrsubnet', { input: '10.0.0.0/30', newbits: 3, netnum: 0 }, 'insufficient address space to extend prefix of 30 by 3', undefined],
    ['cidrsubnet', { input: '10.0.0.0/8', newbits: 2, netnum: 4 }, 'prefix extension of 2 does not accommodate a subnet numbered 4', undefined],
    ['cidrsubnets', { input: '10.0.0.0/8', newbits: [0] }, 'argument 1 (0) must extend prefix by at least one bit', undefined],
    ['cidrsubnets', { input: '10.0.0.0/30', newbits: [1, 1, 1] }, 'not enough remaining address space for a subnet with a prefix of 31 bits after 10.0.0.2/31', undefined],
    ['cidrsubnets', { input: '10.0.0.0/8', newbits: [25] }, 'argument 1 would extend prefix to 33 bits, which is too long for an IPv4 address', undefined],
  ])('when std:%s gets %j, then INVALID_FUNCTION says "%s"', (name, args, message, argument) => {
    const error = thrown(() => stdInvoke(`std:index:${name}`, args));
    expect(error).toMatchObject({ code: 'IAC.INVALID_FUNCTION', kind: 'validation', details: { function: `std:index:${name}`, ...(argument === undefined ? {} : { argument }) } });
    expect(error.message).toContain(`std:${name}: `);
    expect(error.message).toContain(message);
  });
});

describe('std functions: through the Pulumi YAML evaluator', () => {
  it('when a program invokes std:abs (long form with return, short form) and the context answers with stdInvoke, then the outputs are computed', () => {
    const body = 'name: shop\nruntime: yaml\nvariables:\n  x:\n    fn::invoke:\n      function: std:abs\n      arguments: { input: -3 }\n      return: result\noutputs:\n  x: ${x}\n  short:\n    fn::std:abs: { input: -2.5 }\n  upper:\n    fn::invoke:\n      function: std:index:upper\n      arguments: { input: "x${x}" }\n';
    const program = loadProgram({ 'Pulumi.yaml': body }, 'dev');
    const evaluator = new ProgramEvaluator(program.project, program.config, () => ({}), { ...program.context, invoke: stdInvoke });
    expect(projectGraph(program.project, program.config).order).toEqual([]);
    expect(evaluator.outputs()).toEqual({ x: 3, short: { result: 2.5 }, upper: { result: 'X3' } });
  });
});
