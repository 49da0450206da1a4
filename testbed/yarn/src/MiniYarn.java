// The local YARN testbed (testbed/yarn/up.sh): one JVM running Hadoop's MiniYARNCluster, a
// real ResourceManager (Capacity Scheduler, queues prod 70% / research 30%, preemption on)
// and N NodeManagers that each declare GPUs (yarn.io/gpu, countable, no GPU plugin), vcores
// and memory. Runs until killed (SIGTERM stops the cluster cleanly).
//
// Compiled by packages.sh with javac against the jars packages.sh resolved; nothing here is built
// in the work tree. Settings come from system properties (up.sh passes them from lib.sh):
//   stratctl.yarn.run    run directory (cwd too: MiniYARNCluster 3.5 works in
//                        ./target/test/data/stratctl/yarn-<n>: NodeManager dirs, container logs)
//   stratctl.yarn.nodes, .gpus, .vcores, .memMb   NodeManagers and what each declares
//   stratctl.yarn.webPort   RM REST/web port; stratctl.yarn.rpcBase   first of 4 RM RPC ports
// Before starting it writes <run>/etc/capacity-scheduler.xml (<run>/etc must be first on its
// classpath); on success <run>/etc/yarn-site.xml (the effective configuration, usable as a
// client's or an AM's HADOOP_CONF_DIR), <run>/rm-address and, last, <run>/ready.
import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public final class MiniYarn {
  private static String prop(String name, String dflt) {
    return System.getProperty("stratctl.yarn." + name, dflt);
  }

  private static void writeAtomically(File f, byte[] data) throws Exception {
    File tmp = new File(f.getPath() + ".tmp");
    try (OutputStream out = new FileOutputStream(tmp)) {
      out.write(data);
    }
    Files.move(tmp.toPath(), f.toPath(), StandardCopyOption.REPLACE_EXISTING,
        StandardCopyOption.ATOMIC_MOVE);
  }

  public static void main(String[] args) throws Exception {
    File run = new File(prop("run", ".")).getAbsoluteFile();
    int nodes = Integer.parseInt(prop("nodes", "2"));
    int gpus = Integer.parseInt(prop("gpus", "4"));
    int vcores = Integer.parseInt(prop("vcores", "8"));
    int memMb = Integer.parseInt(prop("memMb", "16384"));
    int webPort = Integer.parseInt(prop("webPort", "28088"));
    int rpcBase = Integer.parseInt(prop("rpcBase", "28030"));
    String host = prop("host", "127.0.0.1");
    String cs = "yarn.scheduler.capacity.";
    String pcpp = "yarn.resourcemanager.monitor.capacity.preemption.";

    YarnConfiguration conf = new YarnConfiguration();
    // Fixed ports: without this MiniYARNCluster sets every RM address, REST included, to :0.
    // The NodeManagers' own ports stay ephemeral (MiniYARNCluster always sets them to :0).
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
    conf.set(YarnConfiguration.RM_SCHEDULER_ADDRESS, host + ":" + rpcBase);
    conf.set(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, host + ":" + (rpcBase + 1));
    conf.set(YarnConfiguration.RM_ADDRESS, host + ":" + (rpcBase + 2));
    conf.set(YarnConfiguration.RM_ADMIN_ADDRESS, host + ":" + (rpcBase + 3));
    conf.set(YarnConfiguration.RM_WEBAPP_ADDRESS, host + ":" + webPort);
    conf.set(YarnConfiguration.RM_HOSTNAME, host);

    // Resources. GPUs as a plain countable resource type (no GPU plugin). Memory: every
    // NodeManager of a MiniYARNCluster gets yarn.nodemanager.resource.memory-mb set from
    // yarn.minicluster.yarn.nodemanager.resource.memory-mb (default 4096), whatever we set;
    // yarn.nodemanager.resource-type.memory-mb is refused ("Attempt to re-define mandatory
    // resource 'memory-mb'").
    conf.set("yarn.resource-types", "yarn.io/gpu");
    conf.set("yarn.nodemanager.resource-type.yarn.io/gpu", Integer.toString(gpus));
    // Without it the largest GPU request new-application reports is Long.MAX_VALUE.
    conf.set("yarn.resource-types.yarn.io/gpu.maximum-allocation", Integer.toString(gpus));
    conf.setInt("yarn.minicluster.yarn.nodemanager.resource.memory-mb", memMb);
    conf.setInt(YarnConfiguration.NM_PMEM_MB, memMb);
    conf.setInt(YarnConfiguration.NM_VCORES, vcores);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, memMb);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, vcores);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
    conf.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
    conf.setBoolean("yarn.nodemanager.vmem-check-enabled", false);
    // A nearly full disk must not mark the NodeManagers UNHEALTHY.
    conf.setFloat("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", 100.0f);
    conf.setLong("yarn.nodemanager.disk-health-checker.min-free-space-per-disk-mb", 0);

    // Capacity Scheduler: two queues, research may borrow up to the whole cluster. Written to
    // <run>/etc/capacity-scheduler.xml, which is on the JVM's classpath: the RM reads it at
    // start and again on `rmadmin -refreshQueues` (which sees only that file: queues set
    // programmatically are lost on a refresh, "Queue configuration missing child queue
    // names for root"). Edit it and refresh to change queues on a running testbed.
    conf.set(YarnConfiguration.RM_SCHEDULER,
        "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler");
    Configuration csConf = new Configuration(false);
    // The RM refuses the GPU resource type with the default DefaultResourceCalculator.
    csConf.set(cs + "resource-calculator",
        "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator");
    csConf.set(cs + "root.queues", "prod,research");
    csConf.set(cs + "root.prod.capacity", "70");
    csConf.set(cs + "root.prod.maximum-capacity", "100");
    csConf.set(cs + "root.research.capacity", "30");
    csConf.set(cs + "root.research.maximum-capacity", "100");
    for (String q : new String[] {"prod", "research"}) {
      // One user (the submitter) may take more than the queue's guarantee.
      csConf.set(cs + "root." + q + ".user-limit-factor", "10");
      csConf.set(cs + "root." + q + ".state", "RUNNING");
      csConf.set(cs + "root." + q + ".acl_submit_applications", "*");
      csConf.set(cs + "root." + q + ".acl_administer_queue", "*");
    }
    // Every trial is an application with its own AM: allow AMs half a queue (default 10%).
    csConf.set(cs + "maximum-am-resource-percent", "0.5");
    csConf.set(cs + "node-locality-delay", "-1");

    // Preemption: research's borrowed containers are taken back for prod within seconds.
    // The policy reads its settings from the scheduler's configuration: in both files.
    conf.setBoolean(YarnConfiguration.RM_SCHEDULER_ENABLE_MONITORS, true);
    conf.set(YarnConfiguration.RM_SCHEDULER_MONITOR_POLICIES,
        "org.apache.hadoop.yarn.server.resourcemanager.monitor.capacity.ProportionalCapacityPreemptionPolicy");
    String[][] preemption = {
      {"monitoring_interval", "1000"},        // ms between runs of the policy (default 3000)
      {"max_wait_before_kill", "3000"},       // ms from marking a container to killing it (15000)
      {"total_preemption_per_round", "1.0"},  // share of the cluster preemptible per run (0.1)
      {"natural_termination_factor", "1.0"},  // (0.2)
      {"max_ignored_over_capacity", "0"},     // (0.1)
    };
    for (String[] kv : preemption) {
      conf.set(pcpp + kv[0], kv[1]);
      csConf.set(pcpp + kv[0], kv[1]);
    }
    File etc = new File(run, "etc");
    etc.mkdirs();
    java.io.ByteArrayOutputStream csXml = new java.io.ByteArrayOutputStream();
    csConf.writeXml(csXml);
    writeAtomically(new File(etc, "capacity-scheduler.xml"), csXml.toByteArray());

    // What an application master's classpath is here (a client reads it from the RM's /conf:
    // stratctl's YARN backend does): this configuration and the cluster's jars.
    conf.set(YarnConfiguration.YARN_APPLICATION_CLASSPATH, etc.getPath() + "," + prop("lib", ".") + "/*");
    // SchedulingRequests with placement constraints (stratctl's gang AM: placement spread/pack)
    conf.set("yarn.resourcemanager.placement-constraints.handler", "scheduler");

    // Small things that make a local test faster.
    conf.setInt("yarn.resourcemanager.nodemanagers.heartbeat-interval-ms", 500);
    conf.setInt(YarnConfiguration.RM_AM_MAX_ATTEMPTS, 2);
    // On stop each NodeManager waits up to sleep-delay + process-kill-wait + 1 s for its
    // applications, finished ones included (they stay in its context until their logs are
    // deleted, yarn.nodemanager.log.retain-seconds later): 7 s per NodeManager by default.
    conf.setLong("yarn.nodemanager.sleep-delay-before-sigkill.ms", 250);
    conf.setLong("yarn.nodemanager.process-kill-wait.ms", 500);

    MiniYARNCluster cluster = new MiniYARNCluster("stratctl", 1, nodes, 1, 1);
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      System.err.println("MiniYarn: stopping");
      try {
        cluster.stop();
      } catch (Throwable t) {
        t.printStackTrace();
      }
      stopped.countDown();
    }, "stratctl-miniyarn-stop"));

    try {
      cluster.init(conf);
      cluster.start();
    } catch (Throwable t) {
      t.printStackTrace();
      System.err.println("MiniYarn: failed to start: " + t);
      Runtime.getRuntime().halt(1);  // non-daemon service threads would keep the JVM up
    }

    // Effective configuration (with what MiniYARNCluster added), for clients and AMs.
    Configuration eff = cluster.getConfig();
    java.io.ByteArrayOutputStream xml = new java.io.ByteArrayOutputStream();
    eff.writeXml(xml);
    writeAtomically(new File(etc, "yarn-site.xml"), xml.toByteArray());
    writeAtomically(new File(run, "rm-address"),
        (eff.get(YarnConfiguration.RM_ADDRESS) + "\n").getBytes(StandardCharsets.UTF_8));
    writeAtomically(new File(run, "ready"),
        ("http://" + host + ":" + webPort + "\n").getBytes(StandardCharsets.UTF_8));
    System.err.println("MiniYarn: up, RM " + eff.get(YarnConfiguration.RM_ADDRESS)
        + ", REST http://" + host + ":" + webPort + ", " + nodes + " NodeManagers");
    stopped.await();
  }
}
