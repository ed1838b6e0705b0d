export * from './version.js';
export * from './errors.js';
export * from './envelope.js';
export * from './frame.js';
export * from './methods.js';
export * from './rest.js';
export * from './line-hash.js';
export * from './policy.js';
