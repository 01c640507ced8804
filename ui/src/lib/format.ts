// How times, durations and states read on every page.

export const TASK_STATES = ['unscheduled', 'pending', 'running', 'completed', 'failed', 'exception'] as const;

export const RESOLVED: readonly string[] = ['completed', 'failed', 'exception'];

/** A date as the reader's locale shows it; '—' when absent. */
export function when(iso?: string | null): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
}

/** `1 h 2 min`, `3.4 s`: the span from `from` to `to` (now when absent). */
export function duration(from?: string | null, to?: string | null, now = Date.now()): string {
  if (!from) return '—';
  const ms = (to ? new Date(to).getTime() : now) - new Date(from).getTime();
  if (!Number.isFinite(ms) || ms < 0) return '—';
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

export const count = (n: number) => n.toLocaleString('en-US');
