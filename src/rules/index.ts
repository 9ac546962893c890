export { renderIptables } from './iptables.ts';
export { type NftOptions, renderNftables } from './nftables.ts';
export { portInfos } from './portinfo.ts';
export { IPTABLES_JUMPS, type JumpRule, jumpArgs, renderJumpCommands } from './jumps.ts';
export { type RulesOptions, resolveRulesOptions } from './options.ts';
export { computeProbability } from './probability.ts';
export {
  base32Std,
  extChainName,
  fwChainName,
  portProtoHash,
  sepChainName,
  svcChainName,
  svlChainName,
} from './hash.ts';
