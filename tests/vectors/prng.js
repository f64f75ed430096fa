// The seeded PRNG both vector generators use (mulberry32: 32-bit state, uniform floats in [0, 1)), so
// their output depends on their seed alone, never on the clock or Math.random.
'use strict';

function mulberry32(seed) {
  let state = seed >>> 0;
  return function next() {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

module.exports = { mulberry32 };
