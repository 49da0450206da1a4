package io.stratctl.yarn;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Executors;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

/**
 * The gang AM's small HTTP server: where a trial's containers send their intermediate
 * reports and their result (stratctl/trial/metrics.py), and where stratctl reads them while
 * the application runs, through the ResourceManager's web proxy ({@code /proxy/<app>/...}:
 * this server is the AM's tracking URL). No shared filesystem is needed: the containers reach
 * the AM, and the submitting machine reaches only the ResourceManager. Once the gang ends,
 * the result travels on in the AM's final diagnostics ({@link #diagnosticsLine}).
 *
 * <ul>
 * <li>{@code POST /<secret>/report?step=S&rank=R}, body one JSON object (one line of
 *     report.jsonl): kept per step, the lowest rank's, the latest {@value #STEPS} steps;
 * <li>{@code POST /<secret>/result?rank=R}, body a JSON object: kept, the lowest rank's;
 * <li>{@code GET /reports}: the kept reports as JSON lines, by step; {@code GET /result}: the
 *     result (404 until one came).
 * </ul>
 * The secret (random, given to the containers only in STRATCTL_REPORT_URL) keeps anything
 * else that reaches the port from writing; reading is open, as the tracking URL is.
 */
final class Reports {
  static final int STEPS = 200;  // reports kept: the latest steps
  static final int MAX_BODY = 16 * 1024;  // bytes of one report or result
  static final String RESULT_MARK = "stratctl: result ";  // its line in the final diagnostics

  private final HttpServer server;
  private final String secret;
  private final TreeMap<Integer, String> reports = new TreeMap<>();  // step -> the kept line
  private final Map<Integer, Integer> rankOf = new HashMap<>();  // step -> the rank of the kept line
  private String result;
  private int resultRank = Integer.MAX_VALUE;

  Reports() throws IOException {
    byte[] bytes = new byte[16];
    new SecureRandom().nextBytes(bytes);
    StringBuilder s = new StringBuilder();
    for (byte b : bytes) {
      s.append(String.format("%02x", b));
    }
    secret = s.toString();
    server = HttpServer.create(new InetSocketAddress(0), 32);
    server.createContext("/", this::handle);
    server.setExecutor(Executors.newFixedThreadPool(2, r -> {
      Thread t = new Thread(r, "stratctl-reports");
      t.setDaemon(true);
      return t;
    }));
    server.start();
  }

  int port() {
    return server.getAddress().getPort();
  }

  /** The base URL the containers post to: the AM's host, its port and the secret. */
  String postUrl(String host) {
    return "http://" + host + ":" + port() + "/" + secret + "/";
  }

  void stop() {
    server.stop(0);
  }

  /** The line that carries the result in the final diagnostics, "" when no result came. */
  synchronized String diagnosticsLine() {
    return result == null ? "" : "\n" + RESULT_MARK + result;
  }

  synchronized int count() {
    return reports.size();
  }

  private void handle(HttpExchange ex) throws IOException {
    try {
      String path = ex.getRequestURI().getPath();
      Map<String, String> query = query(ex.getRequestURI().getRawQuery());
      String method = ex.getRequestMethod();
      if ("GET".equals(method) && path.endsWith("/reports")) {
        answer(ex, 200, "application/x-ndjson", reportsText());
      } else if ("GET".equals(method) && path.endsWith("/result")) {
        String r = resultText();
        answer(ex, r == null ? 404 : 200, "application/json", r == null ? "" : r);
      } else if ("POST".equals(method) && path.startsWith("/" + secret + "/")) {
        String body = body(ex.getRequestBody());
        if (body == null) {
          answer(ex, 413, "text/plain", "at most " + MAX_BODY + " bytes\n");
          return;
        }
        if (!body.startsWith("{") || !body.endsWith("}")) {
          answer(ex, 400, "text/plain", "a JSON object\n");
          return;
        }
        int rank = number(query.get("rank"), 0);
        if (path.endsWith("/report")) {
          int step = number(query.get("step"), -1);
          if (step < 0) {
            answer(ex, 400, "text/plain", "step=N\n");
            return;
          }
          keepReport(step, rank, body);
        } else if (path.endsWith("/result")) {
          keepResult(rank, body);
        } else {
          answer(ex, 404, "text/plain", "");
          return;
        }
        answer(ex, 204, null, "");
      } else {
        answer(ex, 404, "text/plain", "stratctl gang AM: GET reports or result\n");
      }
    } catch (RuntimeException e) {  // never let a bad request end the server's thread unsaid
      GangMaster.log("report server: " + e);
      answer(ex, 500, "text/plain", "");
    } finally {
      ex.close();
    }
  }

  private synchronized void keepReport(int step, int rank, String line) {
    Integer kept = rankOf.get(step);
    if (kept != null && kept < rank) {
      return;  // a lower rank's values of this step are kept (rank 0's first)
    }
    reports.put(step, line);
    rankOf.put(step, rank);
    while (reports.size() > STEPS) {
      rankOf.remove(reports.pollFirstEntry().getKey());
    }
  }

  private synchronized void keepResult(int rank, String body) {
    if (rank <= resultRank) {
      result = body;
      resultRank = rank;
      GangMaster.log("result from rank " + rank + " (" + body.length() + " bytes)");
    }
  }

  private synchronized String reportsText() {
    StringBuilder out = new StringBuilder();
    for (String line : reports.values()) {
      out.append(line).append('\n');
    }
    return out.toString();
  }

  private synchronized String resultText() {
    return result;
  }

  /** The body as one line (newlines would split a JSON-lines answer), null when too long. */
  private static String body(InputStream in) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    byte[] buf = new byte[4096];
    for (int n; (n = in.read(buf)) > 0; ) {
      out.write(buf, 0, n);
      if (out.size() > MAX_BODY) {
        return null;
      }
    }
    return out.toString(StandardCharsets.UTF_8.name()).replaceAll("[\\r\\n]+", " ").trim();
  }

  private static Map<String, String> query(String raw) throws IOException {
    Map<String, String> out = new HashMap<>();
    if (raw == null) {
      return out;
    }
    for (String pair : raw.split("&")) {
      String[] kv = pair.split("=", 2);
      out.put(URLDecoder.decode(kv[0], "UTF-8"), kv.length > 1 ? URLDecoder.decode(kv[1], "UTF-8") : "");
    }
    return out;
  }

  private static int number(String s, int otherwise) {
    try {
      return s == null ? otherwise : Integer.parseInt(s);
    } catch (NumberFormatException e) {
      return otherwise;
    }
  }

  private static void answer(HttpExchange ex, int status, String type, String text) throws IOException {
    byte[] data = text.getBytes(StandardCharsets.UTF_8);
    if (type != null) {
      ex.getResponseHeaders().set("Content-Type", type);
    }
    ex.sendResponseHeaders(status, status == 204 || data.length == 0 ? -1 : data.length);
    if (data.length > 0 && status != 204) {
      try (OutputStream out = ex.getResponseBody()) {
        out.write(data);
      }
    }
  }
}
