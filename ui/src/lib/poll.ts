// Live data without server push (the deployed API has none): each page re-reads what it shows
// on a timer. The next read starts `factor` times the last one's duration after it ended, at
// least `minMs` (so small views change within about a second) and at most `maxMs` (so a
// 10,000-task group is re-read every few seconds, not back to back). Hidden tabs do not poll.
import { useEffect, useRef, useState } from 'preact/hooks';
import { apiError, type ApiError } from './api';

export interface Polled<T> {
  data?: T;
  error?: ApiError;
  /** When the data was last read in full. */
  updated?: Date;
  /** The last full read's duration, in ms. */
  took?: number;
  reload: () => void;
}

export interface Timing {
  minMs: number;
  maxMs: number;
  factor: number;
}

export const LIVE: Timing = { minMs: 1000, maxMs: 15000, factor: 3 };

/**
 * Reads `load` now and again after every read until `deps` change or the view goes away
 * (only once when `timing` is null: data that no longer changes). `load` may report partial
 * data (a first page) through `partial`. `deps` name what is shown: a change clears it. `who`
 * is who reads (the session's credentials): a change (signing in or out) reads again at once
 * and keeps what is shown until then, so the page does not flash back to "Loading".
 */
export function usePoll<T>(
  load: (partial: (data: T) => void) => Promise<T>,
  deps: unknown[],
  timing: Timing | null,
  who: unknown,
): Polled<T> {
  const [state, setState] = useState<Omit<Polled<T>, 'reload'>>({});
  const kick = useRef<() => void>(() => {});
  // Declared before the loop's effect, so it runs first: other data clears what is shown.
  // eslint-disable-next-line react-hooks/exhaustive-deps
  useEffect(() => setState({}), deps);
  useEffect(() => {
    let alive = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let wake: (() => void) | undefined;
    const sleep = (ms: number) =>
      new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, ms);
      });
    kick.current = () => {
      if (timer) clearTimeout(timer);
      wake?.();
    };
    const onVisible = () => {
      if (document.visibilityState === 'visible') kick.current();
    };
    document.addEventListener('visibilitychange', onVisible);
    (async () => {
      while (alive) {
        const start = performance.now();
        try {
          const data = await load((d) => alive && setState((s) => ({ ...s, data: d })));
          const took = performance.now() - start;
          if (!alive) return;
          setState({ data, updated: new Date(), took });
        } catch (e) {
          if (!alive) return;
          setState((s) => ({ ...s, error: apiError(e) }));
        }
        if (!timing) return;
        const took = performance.now() - start;
        await sleep(Math.min(timing.maxMs, Math.max(timing.minMs, timing.factor * took)));
        while (alive && document.visibilityState === 'hidden') await sleep(60_000);
      }
    })();
    return () => {
      alive = false;
      if (timer) clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisible);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, who]);
  return { ...state, reload: () => kick.current() };
}
