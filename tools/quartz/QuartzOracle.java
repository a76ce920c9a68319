import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.charset.StandardCharsets;
import java.text.ParseException;
import java.util.Calendar;
import java.util.Date;
import java.util.TimeZone;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.quartz.CronExpression;

/**
 * The cron oracle of tests/unit/test_cron_quartz_oracle.py: Quartz's own CronExpression, batch mode.
 *
 * One request per stdin line, tab-separated: expression, zone id, start (epoch ms), count.
 * One answer per stdout line (flushed), tab-separated:
 *   "ok" then up to count fire times (epoch ms), each getNextValidTimeAfter of the one before,
 *        stopping early when Quartz returns null;
 *   "invalid" then ParseException's message (the constructor rejected the expression);
 *   "error" then the exception getNextValidTimeAfter threw (Quartz accepted the expression but
 *        cannot evaluate it).
 * The Quartz version is whichever jar is on the classpath. "max-year" as the whole line answers
 * "ok" and the last year Quartz will fire in (its MAX_YEAR: this JVM's current year + 100).
 *
 * Quartz 2.3 never returns for some expressions it accepts ("0 0 0 0W * ?" loops forever). A
 * request whose computation has used HANG_CPU_NS of CPU time (an answer takes well under a
 * millisecond) is answered "hangs" and the JVM halts: the caller starts another. CPU time, not
 * wall time, so that a loaded machine never turns a slow answer into a hang, and the caller
 * need not wait out a long wall-clock timeout for each of the dozens of hangs a run meets.
 */
public final class QuartzOracle {
    private QuartzOracle() {
    }

    private static final long HANG_CPU_NS = 2_000_000_000L;

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        long[] worker = new long[1];
        ExecutorService pool = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "quartz-oracle-worker");
            t.setDaemon(true);
            worker[0] = t.getId();
            return t;
        });
        String line;
        while ((line = in.readLine()) != null) {
            final String request = line;
            Future<String> reply = pool.submit(() -> answer(request));
            long spentBefore = -1;
            String text = null;
            while (text == null) {
                try {
                    text = reply.get(50, TimeUnit.MILLISECONDS);
                } catch (TimeoutException e) {
                    long spent = cpu.getThreadCpuTime(worker[0]);
                    if (spentBefore < 0) {
                        spentBefore = spent;
                    } else if (spent - spentBefore > HANG_CPU_NS) {
                        out.write("hangs\tno answer after " + (HANG_CPU_NS / 1_000_000) + " ms of CPU time\n");
                        out.flush();
                        Runtime.getRuntime().halt(0);
                    }
                }
            }
            out.write(text);
            out.write('\n');
            out.flush();
        }
        pool.shutdownNow();
    }

    private static String answer(String line) {
        if (line.equals("max-year")) {
            return "ok\t" + (Calendar.getInstance().get(Calendar.YEAR) + 100);
        }
        String[] f = line.split("\t", -1);
        if (f.length != 4) {
            return "bad-request\texpected 4 tab-separated fields, got " + f.length;
        }
        CronExpression expr;
        try {
            expr = new CronExpression(f[0]);
        } catch (ParseException e) {
            return "invalid\t" + oneLine(String.valueOf(e.getMessage()));
        }
        TimeZone zone = TimeZone.getTimeZone(f[1]);
        if (!zone.getID().equals(f[1])) {
            return "bad-request\tunknown zone " + f[1];
        }
        expr.setTimeZone(zone);
        StringBuilder sb = new StringBuilder("ok");
        Date cursor = new Date(Long.parseLong(f[2]));
        int count = Integer.parseInt(f[3]);
        try {
            for (int i = 0; i < count; i++) {
                cursor = expr.getNextValidTimeAfter(cursor);
                if (cursor == null) {
                    break;
                }
                sb.append('\t').append(cursor.getTime());
            }
        } catch (RuntimeException e) {
            return "error\t" + oneLine(e.getClass().getSimpleName() + ": " + e.getMessage());
        }
        return sb.toString();
    }

    private static String oneLine(String s) {
        return s.replace('\t', ' ').replace('\n', ' ').replace('\r', ' ');
    }
}
