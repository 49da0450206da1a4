package io.stratctl.yarn;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.protocolrecords.RegisterApplicationMasterResponse;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerExitStatus;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.ExecutionType;
import org.apache.hadoop.yarn.api.records.ExecutionTypeRequest;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.ResourceSizing;
import org.apache.hadoop.yarn.api.records.SchedulingRequest;
import org.apache.hadoop.yarn.api.records.UpdatedContainer;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint;
import org.apache.hadoop.yarn.api.resource.PlacementConstraints;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.async.AMRMClientAsync;
import org.apache.hadoop.yarn.client.api.async.NMClientAsync;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;

/**
 * stratctl's gang application master: one attempt of one trial as one YARN application.
 *
 * <p>A trial is a gang of roles (the study's tasks: workers, parameter servers, evaluators),
 * each of its own number of containers, size and script. The AM asks for every container of
 * every role (one priority per role, so that containers of different sizes come back told
 * apart) and starts nothing until all of them are allocated, never fewer (YARN has no gang
 * scheduling of its own). Then it knows every container's host, so it gives each container
 * the whole rendezvous contract (Rendezvous.java: ranks over the roles in task order, the
 * nodes' addresses, MASTER_ADDR/MASTER_PORT, the roles' hosts) before any task starts. What
 * it runs comes from its environment, set by stratctl in the submission (stratctl/yarn/app.py):
 * <ul>
 * <li>STRATCTL_AM_ROLES: the roles in task order, {@code name:count,...} (names are DNS labels);
 * <li>STRATCTL_AM_RESOURCES_i: memory-mb=..,vcores=..[,yarn.io/gpu=..] of a container of role i;
 * <li>STRATCTL_AM_SCRIPT_i: base64 of the bash script the containers of role i run;
 * <li>STRATCTL_AM_MASTER_PORT: the trial's MASTER_PORT (derived by stratctl from the
 *     application id, so that two trials sharing a node never collide);
 * <li>STRATCTL_AM_NODE_LABEL (optional): a node label expression;
 * <li>STRATCTL_AM_PLACEMENT (optional): spread (no two containers of the gang on one node) or
 *     pack (all on one node), as placement constraints on the gang's allocation tag;
 *     STRATCTL_AM_PLACEMENT_SCOPE=rack makes that one rack;
 * <li>STRATCTL_AM_GANG_TIMEOUT (seconds, 0 = none): a gang not whole by then gives back what
 *     it holds and asks again after a jittered pause, so partial gangs do not hold GPUs forever.
 * </ul>
 * Each container runs {@code base64 -d <<< $STRATCTL_TASK_SCRIPT > stratctl-task.sh && exec bash
 * stratctl-task.sh} (stdout/stderr into its log dir) with its role's script as
 * STRATCTL_TASK_SCRIPT, the contract (STRATCTL_NUM_NODES, STRATCTL_NODE_RANK, STRATCTL_NODE_ADDRS,
 * MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, STRATCTL_TASK, STRATCTL_TASK_INDEX,
 * STRATCTL_TASKS, STRATCTL_&lt;ROLE&gt;_HOSTS, STRATCTL_&lt;ROLE&gt;_NUM), the AM's PATH,
 * STRATCTL_APP_ATTEMPT (this AM's attempt, 1-based), STRATCTL_REPORT_URL (where the trial library
 * posts its reports and result to this AM: Reports.java) and, when the RM restarted this AM (its
 * container lost or preempted), STRATCTL_YARN_RESTARTED=1. The AM's own STRATCTL_AM_*
 * variables are not passed on.
 *
 * <p>Surplus allocations are released; an ask sent again (gang timeout, a held container
 * lost) replaces the outstanding one. It reports progress 0 while the gang is incomplete, 0.5
 * once launched. Endings, in the final status and diagnostics stratctl reads: all exit 0:
 * SUCCEEDED "stratctl: N tasks succeeded"; a container preempted or lost (-102, -100, -101,
 * -108): FAILED "stratctl: preempted: ..." (the next attempt resumes from its checkpoint);
 * any other non-zero exit: FAILED "stratctl: task ROLE I (rank R) exited with code X". The
 * others are stopped first. Then it unregisters and exits 0; a result a container posted goes in
 * the diagnostics' last line, {@code stratctl: result {...}}. On SIGTERM (the application
 * killed, e.g. a trial pruned) it just exits.
 *
 * <p>Its tracking URL is its report server (Reports.java), read through the RM's web proxy
 * while the application runs: {@code GET <rm>/proxy/<app>/reports}.
 */
public final class GangMaster {
  private static final String GANG_TAG = "stratctl-gang";

  /** One role of the gang: a task of the study, its containers' count, size and script. */
  private static final class Role {
    final int index;  // its place in task order, and the priority of its containers' asks
    final String name;
    final int count;
    final String resources;  // as given; parsed once registered (the RM's resource types known)
    final String script;  // base64 of its containers' script
    Resource capability;
    final List<ContainerRequest> asks = new ArrayList<>();  // plain asks outstanding
    final List<Container> held = new ArrayList<>();

    Role(int index, String name, int count, String resources, String script) {
      this.index = index;
      this.name = name;
      this.count = count;
      this.resources = resources;
      this.script = script;
    }

    Priority priority() {
      return Priority.newInstance(index);
    }

    int missing() {
      return count - held.size();
    }
  }

  private final Map<String, String> env = System.getenv();
  private final List<Role> roles = roles(env);
  private final int tasks = roles.stream().mapToInt(r -> r.count).sum();
  private final int port = Integer.parseInt(required(env, "STRATCTL_AM_MASTER_PORT"));
  private final String placement = env.getOrDefault("STRATCTL_AM_PLACEMENT", "");
  private final String scope = "rack".equals(env.get("STRATCTL_AM_PLACEMENT_SCOPE"))
      ? PlacementConstraints.RACK : PlacementConstraints.NODE;
  private final String label = emptyToNull(env.get("STRATCTL_AM_NODE_LABEL"));
  private final long gangTimeoutMs = 1000L * Long.parseLong(
      env.getOrDefault("STRATCTL_AM_GANG_TIMEOUT", "").isEmpty() ? "0" : env.get("STRATCTL_AM_GANG_TIMEOUT"));
  private final int appAttempt = ContainerId.fromString(env.get(ApplicationConstants.Environment.CONTAINER_ID.name()))
      .getApplicationAttemptId().getAttemptId();
  private final Random random = new Random();
  private final CountDownLatch done = new CountDownLatch(1);

  private Reports reports;  // the containers' reports and result, served as the tracking URL
  private String reportUrl;  // where the containers post them (STRATCTL_REPORT_URL)
  private AMRMClientAsync<ContainerRequest> rm;
  private NMClientAsync nm;
  private final List<SchedulingRequest> placed = new ArrayList<>();  // placement asks sent
  private final Map<ContainerId, String> launchedAs = new HashMap<>();  // "worker 1 (rank 2)"
  private boolean launched;
  private boolean finished;
  private int succeeded;
  private long askedAt;
  private long pausedUntil;  // > 0: backing off after a gang timeout, holding and asking nothing
  private long nextRequestId = 1;  // SchedulingRequests need ids unique within the application

  public static void main(String[] args) throws Exception {
    new GangMaster().run();
  }

  private static String emptyToNull(String s) {
    return s == null || s.isEmpty() ? null : s;
  }

  private static String required(Map<String, String> env, String name) {
    String value = env.get(name);
    if (value == null || value.isEmpty()) {
      throw new IllegalStateException(name + " is not set: this AM is started by stratctl (stratctl/yarn/app.py)");
    }
    return value;
  }

  /** The gang's roles from STRATCTL_AM_ROLES ({@code name:count,...}) and each role's variables. */
  private static List<Role> roles(Map<String, String> env) {
    List<Role> out = new ArrayList<>();
    for (String part : required(env, "STRATCTL_AM_ROLES").split(",")) {
      String[] nameCount = part.split(":", 2);
      int i = out.size();
      out.add(new Role(i, nameCount[0], Integer.parseInt(nameCount[1]),
          env.getOrDefault("STRATCTL_AM_RESOURCES_" + i, "memory-mb=1024,vcores=1"),
          required(env, "STRATCTL_AM_SCRIPT_" + i)));
    }
    return out;
  }

  static void log(String message) {
    System.err.println(java.time.Instant.now() + " stratctl gang AM: " + message);
  }

  private void run() throws Exception {
    YarnConfiguration conf = new YarnConfiguration();
    rm = AMRMClientAsync.createAMRMClientAsync(500, new RmHandler());
    rm.init(conf);
    rm.start();
    nm = NMClientAsync.createNMClientAsync(new NmHandler());
    nm.init(conf);
    nm.start();
    // the report server is the tracking URL: the RM's web proxy (/proxy/<app>/) forwards to it
    reports = new Reports();
    String host = env.getOrDefault(ApplicationConstants.Environment.NM_HOST.name(), "localhost");
    reportUrl = reports.postUrl(host);
    RegisterApplicationMasterResponse registered = rm.registerApplicationMaster(
        host, reports.port(), "http://" + host + ":" + reports.port() + "/");
    ResourceUtils.reinitializeResources(registered.getResourceTypes());
    StringBuilder gang = new StringBuilder();
    for (Role role : roles) {
      role.capability = parseResources(role.resources);
      gang.append(gang.length() == 0 ? "" : ", ").append(role.name).append(" ").append(role.count)
          .append(" x ").append(role.capability);
    }
    log("registered (application attempt " + appAttempt + "); asking for " + gang + ", master port " + port
        + (placement.isEmpty() ? "" : ", placement " + placement + " by " + scope) + (label == null ? "" : ", node label " + label)
        + "; reports at http://" + host + ":" + reports.port() + "/");
    ask();
    while (!done.await(1, TimeUnit.SECONDS)) {
      checkTimeout();
    }
    nm.stop();
    rm.stop();
    reports.stop();
    log("exiting");
    System.exit(0);
  }

  private static Resource parseResources(String spec) {
    Resource r = Resource.newInstance(1024, 1);
    for (String part : spec.split(",")) {
      String[] kv = part.split("=", 2);
      if (kv.length != 2 || kv[1].isEmpty()) {
        continue;
      }
      long value = Long.parseLong(kv[1].trim());
      switch (kv[0].trim()) {
        case "memory-mb": r.setMemorySize(value); break;
        case "vcores": r.setVirtualCores((int) value); break;
        default: r.setResourceValue(kv[0].trim(), value);
      }
    }
    return r;
  }

  private int held() {
    return roles.stream().mapToInt(r -> r.held.size()).sum();
  }

  /** The role a container was allocated for: the priority of its ask is the role's index. */
  private Role roleOf(Container c) {
    int i = c.getPriority() == null ? -1 : c.getPriority().getPriority();
    return i >= 0 && i < roles.size() ? roles.get(i) : null;
  }

  // -- asking for the gang ---------------------------------------------------------------

  /** Withdraws every outstanding ask (a SchedulingRequest is cancelled by sending it again with 0). */
  private synchronized void cancelAsks() {
    for (Role role : roles) {
      for (ContainerRequest r : role.asks) {
        rm.removeContainerRequest(r);
      }
      role.asks.clear();
    }
    List<SchedulingRequest> cancel = new ArrayList<>();
    for (SchedulingRequest r : placed) {
      cancel.add(SchedulingRequest.newBuilder().allocationRequestId(r.getAllocationRequestId())
          .priority(r.getPriority()).executionType(r.getExecutionType()).allocationTags(r.getAllocationTags())
          .resourceSizing(ResourceSizing.newInstance(0, r.getResourceSizing().getResources()))
          .placementConstraintExpression(r.getPlacementConstraint()).build());
    }
    placed.clear();
    if (!cancel.isEmpty()) {
      rm.addSchedulingRequests(cancel);
    }
  }

  /** Asks for the containers each role still misses, replacing any earlier ask. */
  private synchronized void ask() {
    cancelAsks();
    if (held() == 0) {
      askedAt = System.currentTimeMillis();  // a new round: the gang timeout counts from here
    }
    if (held() >= tasks) {
      return;
    }
    log("requesting what is missing, " + held() + " of " + tasks + " held");
    if (placement.isEmpty()) {
      for (Role role : roles) {
        for (int i = 0; i < role.missing(); i++) {
          ContainerRequest request = new ContainerRequest(role.capability, null, null, role.priority(), true, label);
          role.asks.add(request);
          rm.addContainerRequest(request);
        }
      }
      return;
    }
    // affinity to the gang's own tag cannot place the first container (no node has the tag
    // yet: the RM waits forever): the first goes anywhere, the rest beside it once it is held
    boolean first = "pack".equals(placement) && held() == 0;
    PlacementConstraint constraint;
    if (first) {
      constraint = PlacementConstraints.targetNotIn(scope,
          PlacementConstraints.PlacementTargets.allocationTag("stratctl-nothing")).build();
    } else if ("pack".equals(placement)) {
      constraint = PlacementConstraints.targetIn(scope,
          PlacementConstraints.PlacementTargets.allocationTag(GANG_TAG)).build();
    } else {
      constraint = PlacementConstraints.targetNotIn(scope,
          PlacementConstraints.PlacementTargets.allocationTag(GANG_TAG)).build();
    }
    List<SchedulingRequest> requests = new ArrayList<>();
    for (Role role : roles) {
      int missing = first ? (role.index == 0 ? 1 : 0) : role.missing();
      if (missing <= 0) {
        continue;
      }
      requests.add(SchedulingRequest.newBuilder()
          .allocationRequestId(nextRequestId++).priority(role.priority())
          .executionType(ExecutionTypeRequest.newInstance(ExecutionType.GUARANTEED, true))
          .allocationTags(Collections.singleton(GANG_TAG))
          .resourceSizing(ResourceSizing.newInstance(missing, role.capability))
          .placementConstraintExpression(constraint).build());
    }
    log("placement: " + constraint);
    placed.addAll(requests);
    rm.addSchedulingRequests(requests);
  }

  private synchronized void checkTimeout() {
    long now = System.currentTimeMillis();
    if (launched || finished) {
      return;
    }
    if (pausedUntil > 0) {
      if (now >= pausedUntil) {
        pausedUntil = 0;
        ask();
      }
      return;
    }
    if (gangTimeoutMs <= 0 || now - askedAt < gangTimeoutMs) {
      return;
    }
    // Jittered, so that gangs timing out together do not ask again together.
    long backoff = 1000 + (long) (random.nextDouble() * Math.min(gangTimeoutMs, 10000));
    log("gang timeout: not whole after " + gangTimeoutMs / 1000 + " s (" + held() + " of " + tasks
        + " allocated): releasing them, asking again in " + backoff + " ms");
    cancelAsks();
    for (Role role : roles) {
      for (Container c : role.held) {
        rm.releaseAssignedContainer(c.getId());
      }
      role.held.clear();
    }
    pausedUntil = now + backoff;
  }

  private synchronized void allocated(List<Container> containers) {
    for (Container c : containers) {
      Role role = roleOf(c);
      if (role != null && !role.asks.isEmpty()) {
        rm.removeContainerRequest(role.asks.remove(0));
      }
      if (role == null || launched || finished || pausedUntil > 0 || role.missing() <= 0) {
        log("releasing surplus container " + c.getId());
        rm.releaseAssignedContainer(c.getId());
        continue;
      }
      role.held.add(c);
      if ("pack".equals(placement) && held() == 1 && tasks > 1) {
        ask();  // the first of a packed gang is held: the rest beside it
      }
    }
    log("allocated " + held() + " of " + tasks);
    if (!launched && !finished && held() == tasks) {
      launch();
    }
  }

  // -- running it ------------------------------------------------------------------------

  /** Starts every container of the gang, each with the whole contract: all hosts are known now. */
  private void launch() {
    launched = true;
    cancelAsks();  // nothing more to ask for (e.g. an ask sent again after a lost container)
    List<Rendezvous.Role> layout = new ArrayList<>();
    for (Role role : roles) {
      List<String> hosts = new ArrayList<>();
      for (Container c : role.held) {
        hosts.add(c.getNodeId().getHost());  // the NodeManager's host, as YARN reports it
      }
      layout.add(new Rendezvous.Role(role.name, hosts));
    }
    ByteBuffer tokens = tokens();
    String command = "base64 -d <<< $STRATCTL_TASK_SCRIPT > stratctl-task.sh && exec bash stratctl-task.sh"
        + " 1>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR + "/stdout"
        + " 2>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR + "/stderr";
    int rank = 0;
    for (Role role : roles) {
      for (int i = 0; i < role.held.size(); i++, rank++) {
        Container c = role.held.get(i);
        String who = role.name + " " + i + " (rank " + rank + ")";
        launchedAs.put(c.getId(), who);
        Map<String, String> environment = new HashMap<>(Rendezvous.environment(layout, rank, port));
        environment.put("STRATCTL_TASK_SCRIPT", role.script);
        environment.put("STRATCTL_APP_ATTEMPT", Integer.toString(appAttempt));
        environment.put("STRATCTL_REPORT_URL", reportUrl);
        if (appAttempt > 1) {
          environment.put("STRATCTL_YARN_RESTARTED", "1");
        }
        if (env.get("PATH") != null) {
          environment.put("PATH", env.get("PATH"));
        }
        log(who + " on " + c.getNodeId().getHost() + " (" + c.getId() + ")");
        ContainerLaunchContext context = ContainerLaunchContext.newInstance(
            new HashMap<>(), environment, Collections.singletonList(command), null,
            tokens == null ? null : tokens.duplicate(), null);
        nm.startContainerAsync(c, context);
      }
    }
    log("launched all " + tasks + " tasks, master " + layout.get(0).hosts.get(0) + ":" + port);
  }

  private static ByteBuffer tokens() {
    try {
      Credentials credentials = UserGroupInformation.getCurrentUser().getCredentials();
      Iterator<Token<?>> it = credentials.getAllTokens().iterator();
      while (it.hasNext()) {  // the containers must not get the AM's own token
        if (it.next().getKind().equals(AMRMTokenIdentifier.KIND_NAME)) {
          it.remove();
        }
      }
      DataOutputBuffer out = new DataOutputBuffer();
      credentials.writeTokenStorageToStream(out);
      return ByteBuffer.wrap(out.getData(), 0, out.getLength());
    } catch (java.io.IOException e) {
      log("no credentials to pass on: " + e);
      return null;
    }
  }

  private static boolean lost(int exit) {
    return exit == ContainerExitStatus.PREEMPTED || exit == ContainerExitStatus.ABORTED
        || exit == ContainerExitStatus.DISKS_FAILED || exit == ContainerExitStatus.KILLED_BY_CONTAINER_SCHEDULER;
  }

  private synchronized void completed(List<ContainerStatus> statuses) {
    for (ContainerStatus s : statuses) {
      int exit = s.getExitStatus();
      String who = launchedAs.get(s.getContainerId());
      if (finished) {
        continue;
      }
      if (who == null) {  // held, not launched: lost before the gang was whole, ask again for one
        boolean removed = false;
        for (Role role : roles) {
          removed |= role.held.removeIf(c -> c.getId().equals(s.getContainerId()));
        }
        if (removed && !launched && pausedUntil == 0) {
          log("allocated container " + s.getContainerId() + " lost before the gang was whole (" + exit + "): asking again");
          ask();
        }
        continue;
      }
      log("task " + who + " (" + s.getContainerId() + ") ended: exit " + exit);
      if (exit == 0) {
        if (++succeeded == tasks) {
          finish(FinalApplicationStatus.SUCCEEDED, "stratctl: " + tasks + " tasks succeeded");
        }
      } else if (lost(exit)) {
        finish(FinalApplicationStatus.FAILED, "stratctl: preempted: task " + who + " (" + s.getContainerId()
            + ", exit " + exit + ": " + oneLine(s.getDiagnostics()) + ")");
      } else {
        finish(FinalApplicationStatus.FAILED, "stratctl: task " + who + " exited with code " + exit);
      }
    }
  }

  private static String oneLine(String s) {
    String t = s == null ? "" : s.replaceAll("\\s+", " ").trim();
    return t.length() > 200 ? t.substring(0, 200) : t;
  }

  private void finish(FinalApplicationStatus status, String diagnostics) {
    finished = true;
    log(status + ": " + diagnostics);
    for (Role role : roles) {
      for (Container c : role.held) {
        if (launched) {
          nm.stopContainerAsync(c.getId(), c.getNodeId());
        } else {
          rm.releaseAssignedContainer(c.getId());
        }
      }
    }
    try {
      // the result (if a container sent one) on its own last line: the RM keeps it in the
      // application's diagnostics, where stratctl reads it once the application ended
      rm.unregisterApplicationMaster(status, diagnostics + reports.diagnosticsLine(), null);
    } catch (Exception e) {
      log("unregister failed: " + e);
    }
    done.countDown();
  }

  // -- callbacks -------------------------------------------------------------------------

  private final class RmHandler extends AMRMClientAsync.AbstractCallbackHandler {
    @Override public void onContainersAllocated(List<Container> containers) { allocated(containers); }
    @Override public void onContainersCompleted(List<ContainerStatus> statuses) { completed(statuses); }
    @Override public void onContainersUpdated(List<UpdatedContainer> containers) { }
    @Override public void onShutdownRequest() { log("the RM asks this AM to shut down"); done.countDown(); }
    @Override public void onNodesUpdated(List<NodeReport> nodes) { }
    @Override public float getProgress() { return finished ? 1.0f : launched ? 0.5f : 0.0f; }
    @Override public void onError(Throwable e) { log("RM error: " + e); done.countDown(); }
  }

  private final class NmHandler extends NMClientAsync.AbstractCallbackHandler {
    @Override public void onContainerStarted(ContainerId id, Map<String, ByteBuffer> data) { }
    @Override public void onContainerStatusReceived(ContainerId id, ContainerStatus status) { }
    @Override public void onContainerStopped(ContainerId id) { }
    @Override public void onStartContainerError(ContainerId id, Throwable t) {
      synchronized (GangMaster.this) {
        if (!finished) {
          finish(FinalApplicationStatus.FAILED, "stratctl: task " + launchedAs.get(id) + " could not start: "
              + oneLine(t.toString()));
        }
      }
    }
    @Override public void onContainerResourceIncreased(ContainerId id, Resource r) { }
    @Override public void onContainerResourceUpdated(ContainerId id, Resource r) { }
    @Override public void onGetContainerStatusError(ContainerId id, Throwable t) { }
    @Override public void onIncreaseContainerResourceError(ContainerId id, Throwable t) { }
    @Override public void onUpdateContainerResourceError(ContainerId id, Throwable t) { }
    @Override public void onStopContainerError(ContainerId id, Throwable t) { }
  }
}
