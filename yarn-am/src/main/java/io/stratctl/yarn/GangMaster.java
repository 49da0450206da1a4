package io.stratctl.yarn;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CountDownLatch;

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
 * <p>It asks for the gang's N containers and starts the trial's script in all of them once all
 * N are allocated, never in fewer (YARN has no gang scheduling of its own). What it runs comes
 * from its environment, set by stratctl in the submission (stratctl/yarn/app.py):
 * <ul>
 * <li>STRATCTL_TASKS: N; STRATCTL_TASK_RESOURCES: memory-mb=..,vcores=..[,yarn.io/gpu=..] per container;
 * <li>STRATCTL_TASK_SCRIPT: base64 of the bash script each container runs;
 * <li>STRATCTL_NODE_LABEL (optional): a node label expression;
 * <li>STRATCTL_PLACEMENT (optional): spread (no two on one node) or pack (all on one node),
 *     as placement constraints on the gang's allocation tag; STRATCTL_PLACEMENT_SCOPE=rack
 *     makes that one rack;
 * <li>STRATCTL_GANG_TIMEOUT (seconds, 0 = none): a gang not whole by then gives back what it holds
 *     and asks again after a jittered pause, so partial gangs do not hold GPUs forever.
 * </ul>
 * Each container runs {@code base64 -d <<< $STRATCTL_TASK_SCRIPT > stratctl-task.sh && exec bash
 * stratctl-task.sh} (stdout/stderr into its log dir) with every STRATCTL_* variable, the AM's PATH,
 * STRATCTL_TASK_INDEX (0..N-1), STRATCTL_APP_ATTEMPT (this AM's attempt, 1-based) and, when the RM
 * restarted this AM (its container lost or preempted), STRATCTL_YARN_RESTARTED=1.
 *
 * <p>No container starts before all N are allocated; surplus allocations are released; an ask
 * sent again (gang timeout, a held container lost) replaces the outstanding one. It reports
 * progress 0 while the gang is incomplete, 0.5 once launched. Endings, in the
 * final status and diagnostics stratctl reads: all N exit 0: SUCCEEDED "stratctl: N tasks
 * succeeded"; a container preempted or lost (-102, -100, -101, -108): FAILED "stratctl:
 * preempted: ..." (the next attempt resumes from its checkpoint); any other non-zero exit:
 * FAILED "stratctl: task i exited with code X". The others are stopped first. Then it
 * unregisters and exits 0. On SIGTERM (the application killed) it just exits.
 */
public final class GangMaster {
  private static final String GANG_TAG = "stratctl-gang";
  private static final Priority PRIORITY = Priority.newInstance(0);

  private final Map<String, String> env = System.getenv();
  private final int tasks = Integer.parseInt(env.getOrDefault("STRATCTL_TASKS", "1"));
  private final String placement = env.getOrDefault("STRATCTL_PLACEMENT", "");
  private final String scope = "rack".equals(env.get("STRATCTL_PLACEMENT_SCOPE"))
      ? PlacementConstraints.RACK : PlacementConstraints.NODE;
  private final String label = emptyToNull(env.get("STRATCTL_NODE_LABEL"));
  private final long gangTimeoutMs = 1000L * Long.parseLong(
      env.getOrDefault("STRATCTL_GANG_TIMEOUT", "").isEmpty() ? "0" : env.get("STRATCTL_GANG_TIMEOUT"));
  private final int appAttempt = ContainerId.fromString(env.get(ApplicationConstants.Environment.CONTAINER_ID.name()))
      .getApplicationAttemptId().getAttemptId();
  private final Random random = new Random();
  private final CountDownLatch done = new CountDownLatch(1);

  private AMRMClientAsync<ContainerRequest> rm;
  private NMClientAsync nm;
  private Resource capability;
  private final List<ContainerRequest> asks = new ArrayList<>();          // plain asks outstanding
  private final List<SchedulingRequest> placed = new ArrayList<>();      // placement asks sent
  private final List<Container> held = new ArrayList<>();
  private final Map<ContainerId, Integer> index = new HashMap<>();
  private boolean launched;
  private boolean finished;
  private int succeeded;
  private long askedAt;
  private long pausedUntil;  // > 0: backing off after a gang timeout, holding and asking nothing
  private long generation;  // schedulingRequest ids of one round of asking

  public static void main(String[] args) throws Exception {
    new GangMaster().run();
  }

  private static String emptyToNull(String s) {
    return s == null || s.isEmpty() ? null : s;
  }

  private static void log(String message) {
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
    RegisterApplicationMasterResponse registered = rm.registerApplicationMaster("", 0, "");
    ResourceUtils.reinitializeResources(registered.getResourceTypes());
    capability = parseResources(env.getOrDefault("STRATCTL_TASK_RESOURCES", "memory-mb=1024,vcores=1"));
    log("registered (application attempt " + appAttempt + "); asking for " + tasks + " x " + capability
        + (placement.isEmpty() ? "" : ", placement " + placement + " by " + scope) + (label == null ? "" : ", node label " + label));
    ask();
    while (!done.await(1, java.util.concurrent.TimeUnit.SECONDS)) {
      checkTimeout();
    }
    nm.stop();
    rm.stop();
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

  // -- asking for the gang ---------------------------------------------------------------

  /** Withdraws every outstanding ask (a SchedulingRequest is cancelled by sending it again with 0). */
  private synchronized void cancelAsks() {
    for (ContainerRequest r : asks) {
      rm.removeContainerRequest(r);
    }
    asks.clear();
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

  /** Asks for the containers the gang still misses (tasks - held), replacing any earlier ask. */
  private synchronized void ask() {
    cancelAsks();
    if (held.isEmpty()) {
      askedAt = System.currentTimeMillis();  // a new round: the gang timeout counts from here
    }
    generation++;
    int missing = tasks - held.size();
    if (missing <= 0) {
      return;
    }
    if (placement.isEmpty()) {
      log("requesting " + missing + " container(s), " + held.size() + " of " + tasks + " held");
      for (int i = 0; i < missing; i++) {
        ContainerRequest request = new ContainerRequest(capability, null, null, PRIORITY, true, label);
        asks.add(request);
        rm.addContainerRequest(request);
      }
      return;
    }
    PlacementConstraint constraint;
    if ("pack".equals(placement) && held.isEmpty()) {
      // affinity to the gang's own tag cannot place the first container (no node has the tag
      // yet: the RM waits forever): the first goes anywhere, the rest beside it once it is held
      missing = 1;
      constraint = PlacementConstraints.targetNotIn(scope,
          PlacementConstraints.PlacementTargets.allocationTag("stratctl-nothing")).build();
    } else if ("pack".equals(placement)) {
      constraint = PlacementConstraints.targetIn(scope,
          PlacementConstraints.PlacementTargets.allocationTag(GANG_TAG)).build();
    } else {
      constraint = PlacementConstraints.targetNotIn(scope,
          PlacementConstraints.PlacementTargets.allocationTag(GANG_TAG)).build();
    }
    log("requesting " + missing + " container(s), " + held.size() + " of " + tasks + " held, " + constraint);
    SchedulingRequest request = SchedulingRequest.newBuilder()
        .allocationRequestId(generation).priority(PRIORITY)
        .executionType(ExecutionTypeRequest.newInstance(ExecutionType.GUARANTEED, true))
        .allocationTags(java.util.Collections.singleton(GANG_TAG))
        .resourceSizing(ResourceSizing.newInstance(missing, capability))
        .placementConstraintExpression(constraint).build();
    placed.add(request);
    rm.addSchedulingRequests(java.util.Collections.singletonList(request));
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
    log("gang timeout: not whole after " + gangTimeoutMs / 1000 + " s (" + held.size() + " of " + tasks
        + " allocated): releasing them, asking again in " + backoff + " ms");
    cancelAsks();
    for (Container c : held) {
      rm.releaseAssignedContainer(c.getId());
    }
    held.clear();
    pausedUntil = now + backoff;
  }

  private synchronized void allocated(List<Container> containers) {
    for (Container c : containers) {
      if (!asks.isEmpty()) {
        rm.removeContainerRequest(asks.remove(0));
      }
      if (launched || finished || pausedUntil > 0 || held.size() >= tasks) {
        log("releasing surplus container " + c.getId());
        rm.releaseAssignedContainer(c.getId());
        continue;
      }
      held.add(c);
      if ("pack".equals(placement) && held.size() == 1 && tasks > 1) {
        ask();  // the first of a packed gang is held: the rest beside it
      }
    }
    log("allocated " + held.size() + " of " + tasks);
    if (!launched && !finished && held.size() == tasks) {
      launch();
    }
  }

  // -- running it ------------------------------------------------------------------------

  private void launch() {
    launched = true;
    cancelAsks();  // nothing more to ask for (e.g. an ask sent again after a lost container)
    ByteBuffer tokens = tokens();
    String command = "base64 -d <<< $STRATCTL_TASK_SCRIPT > stratctl-task.sh && exec bash stratctl-task.sh"
        + " 1>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR + "/stdout"
        + " 2>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR + "/stderr";
    for (int i = 0; i < held.size(); i++) {
      Container c = held.get(i);
      index.put(c.getId(), i);
      Map<String, String> environment = new HashMap<>();
      for (Map.Entry<String, String> e : env.entrySet()) {
        if (e.getKey().startsWith("STRATCTL_")) {
          environment.put(e.getKey(), e.getValue());
        }
      }
      environment.put("STRATCTL_TASK_INDEX", Integer.toString(i));
      environment.put("STRATCTL_APP_ATTEMPT", Integer.toString(appAttempt));
      if (appAttempt > 1) {
        environment.put("STRATCTL_YARN_RESTARTED", "1");
      }
      if (env.get("PATH") != null) {
        environment.put("PATH", env.get("PATH"));
      }
      ContainerLaunchContext context = ContainerLaunchContext.newInstance(
          new HashMap<>(), environment, java.util.Collections.singletonList(command), null,
          tokens == null ? null : tokens.duplicate(), null);
      nm.startContainerAsync(c, context);
    }
    log("launched all " + tasks + " tasks");
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
      Integer i = index.get(s.getContainerId());
      if (finished) {
        continue;
      }
      if (i == null) {  // held, not launched: lost before the gang was whole, ask again for one
        boolean removed = held.removeIf(c -> c.getId().equals(s.getContainerId()));
        if (removed && !launched && pausedUntil == 0) {
          log("allocated container " + s.getContainerId() + " lost before the gang was whole (" + exit + "): asking again");
          ask();
        }
        continue;
      }
      log("task " + i + " (" + s.getContainerId() + ") ended: exit " + exit);
      if (exit == 0) {
        if (++succeeded == tasks) {
          finish(FinalApplicationStatus.SUCCEEDED, "stratctl: " + tasks + " tasks succeeded");
        }
      } else if (lost(exit)) {
        finish(FinalApplicationStatus.FAILED, "stratctl: preempted: task " + i + " (" + s.getContainerId()
            + ", exit " + exit + ": " + oneLine(s.getDiagnostics()) + ")");
      } else {
        finish(FinalApplicationStatus.FAILED, "stratctl: task " + i + " exited with code " + exit);
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
    for (Container c : held) {
      if (launched) {
        nm.stopContainerAsync(c.getId(), c.getNodeId());
      } else {
        rm.releaseAssignedContainer(c.getId());
      }
    }
    try {
      rm.unregisterApplicationMaster(status, diagnostics, null);
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
          finish(FinalApplicationStatus.FAILED, "stratctl: task " + index.get(id) + " could not start: " + oneLine(t.toString()));
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
