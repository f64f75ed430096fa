#!/usr/bin/env node
// Generates tests/vectors/semver-range-vectors.json: what npm's `semver` (the version ql3 pins) says of
// a few hundred hand-picked and generated version ranges, and whether ql3 accepts each one as a
// placement runtime's versionRange (task-attempts.md §3A).
//
// It installs nothing. Install the pinned semver somewhere and name that directory:
//
//   npm install --prefix /tmp/semver-gen semver@7.7.4
//   node tests/vectors/generate_semver_vectors.js /tmp/semver-gen > tests/vectors/semver-range-vectors.json
//
// (or SEMVER_DIR=/tmp/semver-gen instead of the argument). The directory may be the npm prefix or the
// semver package directory itself. Deterministic: its own seeded PRNG, no clock.
//
// ql3's check (packages/ql3-runtime-core/src/remote-execution/remoteWorkerPlacement.ts,
// normalizeRemoteWorkerPlacement): versionRange must be a string of 1..128 UTF-16 code units with no
// character in U+0000..U+001F or U+007F (boundedString), and then semver().validRange(versionRange)
// must not be null, called without options (not loose, no includePrerelease).
//
// Each record: {"range": x, "validRange": semver.validRange(x) (its normalized form, or null),
// "ql3": whether ql3 accepts x}.
'use strict';

const fs = require('node:fs');
const path = require('node:path');

const PINNED = '7.7.4'; // packages/ql3-runtime-core/package.json: "semver": "7.7.4"
const SEED = 0x7e3_5e11;

function loadSemver() {
  const dir = process.argv[2] || process.env.SEMVER_DIR;
  if (!dir) {
    process.stderr.write('usage: node generate_semver_vectors.js SEMVER_DIR (or SEMVER_DIR=...);\n' +
      `install it first: npm install --prefix /tmp/semver-gen semver@${PINNED}\n`);
    process.exit(2);
  }
  const candidates = [path.resolve(dir, 'node_modules', 'semver'), path.resolve(dir)];
  const packageDir = candidates.find((d) => fs.existsSync(path.join(d, 'package.json')) &&
    JSON.parse(fs.readFileSync(path.join(d, 'package.json'), 'utf8')).name === 'semver');
  if (!packageDir) {
    process.stderr.write(`no semver package under ${dir}\n`);
    process.exit(2);
  }
  const version = JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'), 'utf8')).version;
  if (version !== PINNED) {
    process.stderr.write(`semver ${version} found, ql3 pins ${PINNED}\n`);
    process.exit(2);
  }
  return { semver: require(packageDir), version };
}

const { mulberry32 } = require('./prng');
const random = mulberry32(SEED);
const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
const pick = (xs) => xs[int(0, xs.length - 1)];
const chance = (p) => random() < p;

const HAND_PICKED = [
  // Valid in npm semver.
  '*', '', ' ', 'x', 'X', 'x.x', 'x.x.x', '*.*.*', '1', '1.2', '1.2.3', '01.2.3', '1.02.3', '1.2.03',
  '1.x', '1.X', '1.*', '1.2.x', '1.x.x', '1.x.3', 'x.2.3',
  '^1.2.3', '^0.2.3', '^0.0.3', '^0.0', '^0', '^1.2', '^1', '^1.x', '^0.x', '^*', '^x', '^1.2.3-beta.2',
  '^ 1.2.3', '^  1.2.3', '^1.2.3 ^2', '~1.2.3', '~1.2', '~1', '~0', '~*', '~> 1.2.3', '~>1.2', '~ 1.2',
  '~1.2.3-beta.2', '>=1.0.0', '>= 1.0.0', '>=1.0.0 <2.0.0', '>=1.0.0  <2.0.0', '>1.0.0', '<2.0.0', '<=2.0.0',
  '=1.2.3', 'v1.2.3', '=v1.2.3', 'v 1.2.3', '= 1.2.3', 'V1.2.3', '>=v1.2.3', '>= v1.2.3', 'vv1.2.3',
  '==1.2.3', '=1.x', '>1', '>1.2', '<1', '<1.2', '>=1', '<=1.2', '<x', '>x', '>=x', '<=*', '>*', '<0.0.0-0',
  '1.2.3 - 2.3.4', '1.2 - 2.3.4', '1.2.3 - 2.3', '1 - 2', '* - 2', '1.2.3 - *', 'x - x', '1.2.3-pre - 2.3.4-pre',
  '1.2.3  -  2.3.4', '1.2.3 - 2.3.4 || 3', '1 || 2', '1 ||2', '1|| 2', '1||2', '||', '1 ||', '|| 1',
  '1 || || 2', '^1 || ^2 || ^3', '<1 || >=2 <3 || 4.x', '1.2.3-alpha', '1.2.3-alpha.1', '1.2.3-0',
  '1.2.3-alpha.beta', '1.2.3-x.7.z.92', '1.2.3-alpha+001', '1.2.3+20130313144700', '1.2.3+exp.sha.5114f85',
  '1.2.3-beta+exp.sha.5114f85', '1.2.3-rc.1+build.1', '1.2+build', '1+build', '^1.2.3+build', '>=1.2.3+b <2',
  '1.2.3-', '1.2.3-01', '1.2.3-0a', '1.2.3--', '1.2.3-a-b', '1.2.3-a..b', '1.2.3+', '1.2.3+a..b',
  '>=0.0.0', '>= 0.0.0', '>=0.0.0-0', '>=0.0.0 <1', '<0.0.0', '<0.0.0-0 || 1', '<0.0.0-0 || <0.0.0-0',
  '* || 1', '1 || *', '1 *', '* 1', '>1 *', '1.2.3 1.2.3', '1.2.3 =1.2.3', '>=1 >=1',
  '  1.2.3  ', ' ^1.2.3', '1.2.3 ', '1   2', '>  1.2.3', '<  1.2.3', '> = 1.2.3', '>= = 1.2.3',
  '9007199254740991.0.0', '9007199254740992.0.0', '1.9007199254740991.0', '1.2.9007199254740992',
  '^9007199254740991', '~9007199254740991', '>9007199254740991', '<=9007199254740991.x',
  '1.2.3-9007199254740992', '1.2.3-99999999999999999999', '1.2.3+99999999999999999999',
  '999999999999999.0.0', '9999999999999999.0.0', '99999999999999999999.0.0', '0.0.99999999999999999',
  '>=14', '>=18.0.0', '^20.10.0', '~3.11', '>=3.8 <4', '20.x', '3.12.*', '>=1.2.3-rc.1 <2', 'v20',
  '1.2.3-rc.1 - 1.2.3-rc.5', '>=18 <19 || >=20', '^18.19.0 || ^20.9.0 || >=21.1.0',
  // Where the Python port (nodesemver) and npm semver part: build metadata (npm strips a `+...` from any
  // comparator), a prerelease identifier starting with `-`, two `*` in one alternative (npm removes
  // only the first), numbers above Number.MAX_SAFE_INTEGER (npm rejects them).
  '1.2.3+build', '~1.2.3+build', '+1.2.3', '1.2+b', '^1.2+b', '1.2.3--01', '~1.2.3--01', '^1.2.3--1', '^1.2.3--01',
  '1.2.3-a--b', '**', '*1.2.3*', '1.*.*', '* *', '* || *', '>=*<=*', '999999999999999*01.2.1',
  '1<*2.0.0', '1.2.3 || 1.2.3-0123456789012345',
  // Invalid in npm semver.
  'lts', 'node 20', 'node>=20', '>=20 node',
  'abc', 'latest', 'next', '>=', '>', '<', '=', '~', '^', '>=  ', '1.2.3.4', '1.2.3.x', '^^1', '~~1',
  '^~1', '~^1', '1 - ', ' - 2', '1 -', '- 1', '1 - 2 - 3', '1- 2', '1 -2', '1-2', '>=1.0.0,<2.0.0',
  '>=1.0.0, <2.0.0', '1.0.0 && 2.0.0', '1 | 2', '1 |||| 2', '| 1', '1.2.3a', '1.2.3.a', 'a.b.c', '1.a',
  '1.2.a', '-1', '-1.2.3', '+1.2.3', '1.2.-3', '1..2', '1.2.', '.1', '1.', '.', '..', '>=1.2.3 <', '~>',
  '~>>1', '>>1', '<<1', '=>1', '=<1', '!1', '!=1.2.3', '1.2.3 !', 'latest || 1', '1 || latest', '*.1',
  '1.*.1', 'x1', '1x', '1.2.3 x', 'x 1.2.3', 'vx', 'v', 'v*', 'v1', 'v1.x', '=', '==', '1.2.3-+', '1.2.3-a+',
  '1.2.3+-', '1.2.3-α', 'ab1.2.3', '(1.2.3)', '[1.2.3,2.0.0)', '1.2.3;', '"1.2.3"', "'1.2.3'", '1.2.3/4',
  '1,2,3', '1.2.3 || abc', 'x || y', 'X.X.X.X', '^1.2.3-', '~1.2.3-', '1.2.3 - 2.3.4 - 5', '1.2.3 - x.y',
  // Whitespace other than the space, non-ASCII and controls (ql3 rejects every control character).
  '\t1.2.3', '1.2.3\t', '1.2.3\n', '\n1.2.3', '1 ||\t2', '>=\t1.2.3', '1.2.3\r', '1.2.3\v', '1.2.3\f',
  '\x001.2.3', '1.2.3\x7f', '1.2.3\x1f', '\u00a01.2.3', '1.2.3\u00a0', '1 ||\u00a02', '>=\u00a01.2.3',
  '\u30001.2.3', '\ufeff1.2.3', '1.2.3\u2028', '\u200b1.2.3', '1.2.3\u0085', '\u0661.\u0662.\u0663',
  '\uff11.2.3', '1.2.3-\u00e9', '1.2.3+\u00e9', '^\u0031.2.3', '1.2.3 \ud83d\ude00', '\u00a0', '\u3000',
];

// Parts for generated ranges: a seeded walk over the grammar (and just outside it).
const OPERATORS = ['', '', '', '=', '<', '>', '<=', '>=', '~', '~>', '^', 'v', '=v', '>=v', ' ', '==', '=>'];
const NUMBERS = ['0', '1', '2', '3', '10', '42', '01', '00', 'x', 'X', 'x', '*', '999', '999999999999999'];
const PRERELEASES = ['alpha', 'beta.1', '0', 'rc-1', '1a', 'x', '01', 'a..b', ''];
const BUILDS = ['build', '001', 'exp.sha.5114f85', 'x', ''];
const JOINERS = [' ', ' ', '  ', ' || ', '||', ' ||', '|| ', ' - ', ' -', '- ', ',', ' && '];

function generatedVersion() {
  let v = pick(NUMBERS);
  const parts = pick([1, 2, 3, 3, 3, 4]);
  for (let i = 1; i < parts; i++) v += '.' + pick(NUMBERS);
  if (chance(0.2)) v += '-' + pick(PRERELEASES);
  if (chance(0.03)) v += '+' + pick(BUILDS);
  return v;
}
function generatedComparator() {
  const op = pick(OPERATORS);
  return op + (chance(0.15) ? ' ' : '') + generatedVersion();
}
function generatedRange() {
  let r = generatedComparator();
  for (let n = pick([0, 0, 1, 1, 2, 3]); n > 0; n--) r += pick(JOINERS) + generatedComparator();
  if (chance(0.1)) r = ' ' + r;
  if (chance(0.1)) r += ' ';
  return r;
}
const MUTATION_CHARS = [...'0123456789.xX- |^~<>=vabz,!'];
// `*` and `+` mostly land in the classes the Python port does not model: rarer, so most vectors test it.
const mutationChar = () => (chance(0.05) ? pick(['*', '+']) : pick(MUTATION_CHARS));
function mutated(r) {
  const i = int(0, r.length);
  switch (int(0, 2)) {
    case 0: return r.slice(0, i) + mutationChar() + r.slice(i);
    case 1: return r.slice(0, i) + r.slice(i + 1);
    default: return r.slice(0, i) + mutationChar() + r.slice(i + 1);
  }
}

const { semver, version } = loadSemver();
const ql3Accepts = (x) => typeof x === 'string' && x.length >= 1 && x.length <= 128 &&
  !/[\u0000-\u001f\u007f]/.test(x) && semver.validRange(x) !== null;

const ranges = [];
const seen = new Set();
const add = (x) => { if (!seen.has(x)) { seen.add(x); ranges.push(x); } };
HAND_PICKED.forEach(add);
// Length bounds: ql3 counts UTF-16 code units and accepts 1..128 (npm semver itself allows 256).
const long = (n) => '>=1.0.0' + ' '.repeat(n - '>=1.0.0'.length);
[127, 128, 129, 256, 257, 300].forEach((n) => add(long(n)));
add('1.2.3 || '.repeat(14) + '1.2.3'); // 131 characters of valid alternatives
add('1 || '.repeat(25) + '1'); // 126
add('^1.2.3-' + 'a'.repeat(121)); // 128
add('^1.2.3-' + 'a'.repeat(122)); // 129
add('1.2.3-' + 'a.'.repeat(60) + 'b'); // 127
for (let n = 14; n <= 18; n++) add('1'.repeat(n) + '.0.0');
while (ranges.length < 420) add(generatedRange());
while (ranges.length < 560) add(mutated(generatedRange()));
while (ranges.length < 600) add(mutated(pick(HAND_PICKED.filter((h) => h.length > 0))));

const header = {
  description: 'validRange: require("semver").validRange(range) (null when invalid); ql3: whether ql3 accepts ' +
    'range as a placement runtime versionRange (a string of 1..128 UTF-16 code units, no U+0000..U+001F ' +
    'or U+007F, validRange not null)',
  generator: 'tests/vectors/generate_semver_vectors.js',
  seed: SEED,
  semver: version,
  node: process.version,
  count: ranges.length,
};
const record = (x) => ({ range: x, validRange: semver.validRange(x), ql3: ql3Accepts(x) });
const lines = ranges.map((x) => JSON.stringify(record(x)));
process.stdout.write(`{"header":${JSON.stringify(header)},\n"vectors":[\n${lines.join(',\n')}\n]}\n`);
