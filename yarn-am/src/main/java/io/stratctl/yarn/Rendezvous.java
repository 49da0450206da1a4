package io.stratctl.yarn;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * The rendezvous contract of one container of a gang: the same variables, by the same rules,
 * as {@code rendezvous.environment} of stratctl (stratctl/rendezvous.py), which is where the
 * contract is defined. No Hadoop here, so a unit test on the Python side compiles this file
 * alone and compares the two for the same gangs (tests/unit/test_yarn_contract.py).
 *
 * <p>Ranks run over all roles in task order, then by index within a role; a node's address is
 * the host its NodeManager reports. {@code main} prints each container's environment, sorted,
 * one {@code NAME=value} a line after a {@code # rank R} line: {@code java
 * io.stratctl.yarn.Rendezvous PORT RANK|all ROLE=HOST,HOST ROLE=HOST ...}.
 */
public final class Rendezvous {
  private Rendezvous() {
  }

  /** One role of the gang and its nodes' addresses, in index order. */
  public static final class Role {
    final String name;
    final List<String> hosts;

    public Role(String name, List<String> hosts) {
      this.name = name;
      this.hosts = hosts;
    }
  }

  /** {@code parameter-server} -> {@code PARAMETER_SERVER}: the role's part of its variables' names. */
  static String roleKey(String role) {
    return role.toUpperCase(Locale.ROOT).replaceAll("[^A-Z0-9]", "_");
  }

  /** The whole contract for the node of rank {@code rank} of the gang {@code roles} (in task order). */
  public static Map<String, String> environment(List<Role> roles, int rank, int port) {
    List<String> addrs = new ArrayList<>();
    List<String> names = new ArrayList<>();
    for (Role role : roles) {
      addrs.addAll(role.hosts);
      names.add(role.name);
    }
    if (rank < 0 || rank >= addrs.size()) {
      throw new IllegalArgumentException("rank " + rank + " outside 0.." + (addrs.size() - 1));
    }
    Map<String, String> env = new TreeMap<>();
    env.put("STRATCTL_NUM_NODES", Integer.toString(addrs.size()));
    env.put("STRATCTL_NODE_RANK", Integer.toString(rank));
    env.put("STRATCTL_NODE_ADDRS", String.join(",", addrs));
    env.put("MASTER_ADDR", addrs.get(0));
    env.put("MASTER_PORT", Integer.toString(port));
    env.put("WORLD_SIZE", Integer.toString(addrs.size()));
    env.put("RANK", Integer.toString(rank));
    env.put("STRATCTL_TASKS", String.join(",", names));
    int first = 0;
    for (Role role : roles) {
      env.put("STRATCTL_" + roleKey(role.name) + "_HOSTS", String.join(",", role.hosts));
      env.put("STRATCTL_" + roleKey(role.name) + "_NUM", Integer.toString(role.hosts.size()));
      if (first <= rank && rank < first + role.hosts.size()) {
        env.put("STRATCTL_TASK", role.name);
        env.put("STRATCTL_TASK_INDEX", Integer.toString(rank - first));
      }
      first += role.hosts.size();
    }
    return env;
  }

  public static void main(String[] args) {
    int port = Integer.parseInt(args[0]);
    List<Role> roles = new ArrayList<>();
    int nodes = 0;
    for (int i = 2; i < args.length; i++) {
      String[] kv = args[i].split("=", 2);
      roles.add(new Role(kv[0], List.of(kv[1].split(","))));
      nodes += roles.get(roles.size() - 1).hosts.size();
    }
    boolean all = "all".equals(args[1]);
    int from = all ? 0 : Integer.parseInt(args[1]);
    int to = all ? nodes : from + 1;
    for (int rank = from; rank < to; rank++) {
      System.out.println("# rank " + rank);
      for (Map.Entry<String, String> e : environment(roles, rank, port).entrySet()) {
        System.out.println(e.getKey() + "=" + e.getValue());
      }
    }
  }
}
