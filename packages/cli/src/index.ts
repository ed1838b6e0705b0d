export { serve, sdkExample } from './serve.js';
