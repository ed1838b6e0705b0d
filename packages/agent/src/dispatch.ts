import { CodedError, type ApprovalRequest, type EventData, type EventName, type MethodName, type Params, type Result } from '@warren/protocol';

/** What a handler of method `M` gets besides its params. */
export interface CallContext<M extends MethodName = MethodName> {
  /** Aborted by a cancel frame, the request's own timeout, or the connection closing. */
  signal: AbortSignal;
  /**
   * The connection the call came on: aborted when it closes. State that outlives one call (a
   * streamed upload) is bound to it, so only that connection continues it and its end undoes it.
   * Absent where calls come from no connection (unit tests).
   */
  connection?: AbortSignal | undefined;
  /** The request frame's binary payload, for methods whose `payload` is `request`. */
  payload?: Buffer | undefined;
  /** Sends one event frame for a streaming method: only the events its registry entry declares, with their data. */
  emit<E extends EventName<M>>(event: E, data: EventData<M, E>, payload?: Uint8Array): void;
  /**
   * Asks the client to approve an operation (seed 001's read/write approval): an `approval` event
   * on this request, answered by an `approval` frame. Resolves false on a deny, on no answer in
   * time, or when the call ends first. Absent where no client can answer.
   */
  requestApproval?(request: ApprovalRequest): Promise<boolean>;
  /** True while the connection's send buffer is above its high-water mark: a producer should pause. */
  congested(): boolean;
  /** Resolves once the send buffer is below its low-water mark, or the connection is gone. */
  drained(): Promise<void>;
}

/** A handler's answer: the result, and the response payload for `payload: 'response'` methods. */
export interface HandlerReturn<M extends MethodName> {
  result: Result<M>;
  payload?: Uint8Array | undefined;
}

export type Handler<M extends MethodName> = (params: Params<M>, ctx: CallContext<M>) => Promise<HandlerReturn<M>>;

/** Every method's handler; the type makes a method without one a compile error. */
export type Handlers = { [M in MethodName]: Handler<M> };

/** Runs one call; throws a {@link CodedError} for anything the caller should see typed. */
export async function dispatch<M extends MethodName>(handlers: Handlers, method: M, params: Params<M>, ctx: CallContext<M>): Promise<HandlerReturn<M>> {
  if (ctx.signal.aborted) throw new CodedError('CANCELLED', `${method} was cancelled before it started.`);
  return handlers[method](params, ctx);
}
