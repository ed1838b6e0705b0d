import { describe, expect, it } from '@jest/globals';
import { removalInProgress } from '../src/docker/engine-errors.js';

describe('engine errors', () => {
  it("tells a remove already under way (the engine's 409) from other conflicts", () => {
    const answer = (statusCode: number, message: string) => ({ statusCode, json: { message } });
    expect(removalInProgress(answer(409, 'removal of container 6ea7bcaf is already in progress'))).toBe(true);
    expect(removalInProgress(answer(409, 'Conflict. The container name "/x" is already in use'))).toBe(false);
    expect(removalInProgress(answer(404, 'No such container: 6ea7bcaf'))).toBe(false);
  });
});
