/**
 * CPU time of the benchmark's processes and of the machine, from /proc (Linux), so that a report can
 * say which process used the two cores while the load ran.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ: 100 on every Linux this runs on). */
const TICKS_PER_SECOND = 100;

/** utime + stime of a process, in ticks (0 when it is gone). */
function processTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces: the fields after it start past the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}

/** Pids whose command name is `comm` (for example every PostgreSQL backend). */
function pidsNamed(comm: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === comm) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** Busy and total ticks of the whole machine (all cores), from /proc/stat. */
function machineTicks(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] as string;
  // user nice system idle iowait irq softirq steal (guest and guest_nice are already in user and nice)
  const v = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = v.reduce((a, b) => a + b, 0);
  const idle = (v[3] ?? 0) + (v[4] ?? 0); // idle + iowait
  return { busy: total - idle, total };
}

/** A group of processes whose CPU is measured together: fixed pids, or every process of a name. */
export interface CpuGroup {
  title: string;
  pids?: () => number[];
  comm?: string;
}

export interface CpuFigure {
  title: string;
  /** Percent of one core over the interval (200 = both cores of a 2-core machine). */
  percentOfCore: number;
}

/** Starts measuring; `stop()` returns each group's CPU use and the machine's over the interval. */
export function measureCpu(groups: CpuGroup[]): { stop: () => { groups: CpuFigure[]; machineBusyPercent: number } } {
  const startedAt = process.hrtime.bigint();
  const machineBefore = machineTicks();
  const before = groups.map((g) => {
    const pids = g.pids ? g.pids() : pidsNamed(g.comm as string);
    return new Map(pids.map((pid) => [pid, processTicks(pid)]));
  });
  return {
    stop: () => {
      const seconds = Number(process.hrtime.bigint() - startedAt) / 1e9;
      const machineAfter = machineTicks();
      const figures = groups.map((g, i) => {
        const pids = g.pids ? g.pids() : pidsNamed(g.comm as string);
        let ticks = 0;
        for (const pid of pids) ticks += processTicks(pid) - ((before[i] as Map<number, number>).get(pid) ?? 0);
        return { title: g.title, percentOfCore: Math.round((ticks / TICKS_PER_SECOND / seconds) * 100) };
      });
      const total = machineAfter.total - machineBefore.total;
      const busyOfCore = ((machineAfter.busy - machineBefore.busy) / TICKS_PER_SECOND / seconds) * 100;
      const attributed = figures.reduce((a, f) => a + f.percentOfCore, 0);
      figures.push({
        title: 'everything else (other processes, interrupts)',
        percentOfCore: Math.max(0, Math.round(busyOfCore - attributed)),
      });
      return {
        groups: figures,
        machineBusyPercent: total > 0 ? Math.round(((machineAfter.busy - machineBefore.busy) / total) * 100) : 0,
      };
    },
  };
}
