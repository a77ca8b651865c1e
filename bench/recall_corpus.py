"""The recall bench's data: planted facts, the questions that ask for them, and chatter.

Each fact is said once, on some day, in the middle of a conversation. Its question is
what a person would ask weeks later: other words, other grammar, sharing with the fact
only what such a question naturally shares (usually one or two key words, rarely the
sentence). Distractors use the same key words in other contexts, so a search that only
matches one word ranks them beside the fact. Chatter around them is generated from
everyday vocabulary in both languages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Fact:
    language: str  # en | zh
    statement: str
    question: str
    distractors: tuple[str, ...]


FACTS: tuple[Fact, ...] = (
    Fact("en", "By the way, my sister Hannah just moved to Lisbon for her new job.",
         "Where did Hannah move?",
         ("Hannah from accounting sent the slides again.", "My sister wants to borrow the tent.")),
    Fact("en", "The wifi password at the cabin is written inside the kitchen cupboard.",
         "where did we keep the cabin internet password?",
         ("I changed my email password today.", "The cabin needs a new roof next year.")),
    Fact("en", "The doctor confirmed I am allergic to penicillin.",
         "what did the doctor say I'm allergic to?",
         ("The doctor was running late this morning.", "My son might be allergic to cats.")),
    Fact("en", "Our wedding anniversary is on the 14th of June.",
         "When is our anniversary?",
         ("June is always busy at work.", "The wedding was lovely, the food was great.")),
    Fact("en", "I parked the car on level 3 of the airport garage, row F.",
         "what level of the garage did I leave the car?",
         ("The airport was packed this morning.", "The car needs new tyres before winter.")),
    Fact("en", "My passport expires in September 2027.",
         "when does my passport expire?",
         ("I found my old passport photos.", "September will be a quiet month.")),
    Fact("en", "The plumber, Marco, will come on Thursday at 8 to fix the boiler.",
         "when is the plumber coming for the boiler?",
         ("Thursday is the team dinner.", "Marco recommended a new pizza place.")),
    Fact("en", "My blood type is O negative.",
         "What's my blood type?",
         ("Blood donations are up this year, says the news.", "The type of coffee I like is dark roast.")),
    Fact("en", "I keep the spare house key under the blue flower pot by the back door.",
         "where is the spare key hidden?",
         ("The blue car next door is new.", "I lost the key to my bike lock.")),
    Fact("en", "My daughter Mia's school play is on March 3rd, she plays the fox.",
         "what role does Mia have in the school play?",
         ("The school sent a letter about the trip.", "Mia wants pancakes for breakfast.")),
    Fact("en", "I started taking the train at 7:42 because the bus route changed.",
         "Which train do I take now?",
         ("The train was cancelled again, typical.", "The bus driver was very friendly.")),
    Fact("en", "My landlord's name is Mr. Okafor and rent is due on the 5th.",
         "what's my landlord's name?",
         ("Rent prices in the city keep rising.", "I paid the electricity bill on the 5th.")),
    Fact("en", "I'm trying to cut sugar, so no more desserts on weekdays.",
         "am I still avoiding sugar?",
         ("The dessert at the wedding was amazing.", "Weekdays are too busy for the gym.")),
    Fact("en", "The gym locker combination is 2-19-33.",
         "what's the code for my locker at the gym?",
         ("The gym is closed on Sunday.", "I need a new combination lock for the shed.")),
    Fact("en", "We decided to name the new puppy Biscuit.",
         "what's the puppy's name?",
         ("The dog next door barks all night.", "The puppy classes start in May.")),
    Fact("en", "My favourite author is Ursula Le Guin, especially The Dispossessed.",
         "who's my favourite author?",
         ("The author signing is on Friday.", "My favourite season is autumn.")),
    Fact("en", "The dentist appointment moved to October 12 at 3pm.",
         "When do I see the dentist?",
         ("The dentist said to floss more.", "October will be rainy, I bet.")),
    Fact("en", "I lent my drill to Tom from number 12.",
         "who has my drill?",
         ("Tom is coming to the barbecue.", "The drill bits are in the garage.")),
    Fact("en", "My manager Priya approved my vacation from August 4 to 15.",
         "when is my vacation?",
         ("Priya is presenting the budget tomorrow.", "August is too hot for hiking.")),
    Fact("en", "I'm vegetarian since last spring, but I still eat eggs.",
         "am I still vegetarian?",
         ("The spring menu has a lot of meat dishes.", "Eggs are expensive this week.")),
    Fact("en", "The insurance policy number for the house is HX-4471-22.",
         "What's the house insurance number?",
         ("Insurance costs went up again.", "The house across the street is for sale.")),
    Fact("en", "My brother's birthday is November 2nd and he wants a chess set.",
         "what gift does my brother want?",
         ("Chess club meets on Tuesdays.", "My brother called about the car.")),
    Fact("en", "The recipe for grandma's soup needs smoked paprika and a bay leaf.",
         "what spices go in grandma's soup?",
         ("Grandma called to say hello.", "The soup at lunch was too salty.")),
    Fact("en", "I'm learning Portuguese on Tuesday and Thursday evenings.",
         "what am I learning on Tuesdays?",
         ("Tuesday evenings are my football nights.", "Learning to cook takes patience.")),
    Fact("en", "The printer at the office is on the fourth floor, next to the kitchen.",
         "where's the office printer?",
         ("The office kitchen ran out of coffee.", "My printer at home is out of ink.")),
    Fact("zh", "我妹妹下个月要去成都读研究生。",
         "我妹妹去哪里读研究生？",
         ("妹妹昨天给我打电话了。", "成都的火锅很好吃。")),
    Fact("zh", "我对花生过敏，吃了会起疹子。",
         "我对什么东西过敏？",
         ("花生酱打折了。", "他说春天容易过敏。")),
    Fact("zh", "我们家的猫叫小白，今年三岁了。",
         "我的猫叫什么名字？",
         ("楼下的猫又跑出来了。", "小白菜今天很便宜。")),
    Fact("zh", "我的车停在公司地下二层B区。",
         "我的车停在哪一层？",
         ("公司明天开会。", "车该洗了。")),
    Fact("zh", "妈妈的生日是农历八月十五。",
         "妈妈什么时候过生日？",
         ("妈妈做的饺子最好吃。", "八月的天气太热了。")),
    Fact("zh", "我的护照明年五月到期，要记得去续签。",
         "我的护照哪个月到期？",
         ("护照照片拍得不好看。", "五月去旅行比较好。")),
    Fact("zh", "房东姓王，每个月十号交房租。",
         "房租每月几号交？",
         ("王老师今天请假了。", "房子附近新开了超市。")),
    Fact("zh", "我最喜欢的水果是芒果。",
         "我喜欢吃什么水果？",
         ("水果店今天关门了。", "芒果味的冰淇淋太甜了。")),
    Fact("zh", "女儿的钢琴课改到周六下午三点了。",
         "女儿的钢琴课是什么时间？",
         ("周六下午要去超市。", "钢琴需要调音了。")),
    Fact("zh", "我在学日语，每周二和周四晚上上课。",
         "我周二晚上上什么课？",
         ("日本的樱花很漂亮。", "周四晚上有球赛。")),
    Fact("zh", "家里的无线网密码写在冰箱上的便签里。",
         "家里的无线网密码在哪里？",
         ("冰箱里没有牛奶了。", "公司的网络今天很慢。")),
    Fact("zh", "我哥哥在深圳做软件工程师。",
         "哥哥在深圳做什么？",
         ("哥哥说周末回来吃饭。", "深圳今天下大雨。")),
    Fact("zh", "医生说我要少喝咖啡，每天最多一杯。",
         "医生让我每天喝几杯咖啡？",
         ("这家咖啡店的拿铁不错。", "医生今天很忙。")),
    Fact("zh", "我们的结婚纪念日是十月二号。",
         "我们的结婚纪念日是哪天？",
         ("十月有七天假期。", "表哥下个月结婚。")),
    Fact("zh", "我把备用钥匙放在门口的花盆下面了。",
         "备用钥匙放在哪儿了？",
         ("花盆里的花都开了。", "钥匙扣坏了。")),
    Fact("zh", "我的血型是A型。",
         "我是什么血型？",
         ("献血车今天在学校门口。", "这种类型的电影我不喜欢。")),
    Fact("zh", "新买的小狗叫豆豆，是一只柯基。",
         "我们家的狗叫什么？",
         ("豆浆油条是最好的早餐。", "隔壁的狗很凶。")),
    Fact("zh", "我的老板李经理批准了我八月的年假。",
         "谁批准了我的年假？",
         ("李阿姨送来了自己种的菜。", "八月的机票很贵。")),
    Fact("zh", "奶奶的汤里要放红枣和枸杞。",
         "奶奶的汤要放什么？",
         ("奶奶今天给我打电话了。", "红枣很甜。")),
    Fact("zh", "我每天早上七点四十坐地铁二号线上班。",
         "我每天坐几号线上班？",
         ("地铁今天很挤。", "早上七点的闹钟太早了。")),
)

_EN_SUBJECTS = ("I", "My brother", "My sister", "The neighbour", "My colleague", "Tom", "Hannah", "Our team",
                "The kids", "My friend", "The landlord", "The doctor", "Grandma", "My manager")
_EN_VERBS = ("talked about", "forgot", "bought", "fixed", "planned", "looked at", "cancelled", "booked",
             "complained about", "finished", "started", "cleaned", "ordered", "asked about")
_EN_THINGS = ("the car", "the garden", "the budget report", "dinner", "the train tickets", "the printer",
              "a new phone", "the school trip", "the kitchen", "the hotel", "the flight", "the meeting",
              "the birthday party", "the doctor's note", "the gym membership", "the rent", "the boiler",
              "the password reset", "the key", "the recipe", "the insurance forms", "the dog food")
_EN_TIMES = ("this morning", "yesterday", "last week", "on Monday", "after lunch", "before the weekend",
             "in the evening", "today", "on the way home", "at the airport", "at the office")
_EN_TAILS = ("and it went fine.", "but it took forever.", "so that's done.", "again, as usual.",
             "and nobody noticed.", "which was a relief.", "and I'm tired now.", "— what a day.")
_EN_REPLIES = ("That sounds like a lot.", "Nice, glad it worked out.", "Oh no, that's annoying.",
               "Good to hear!", "Want me to remind you later?", "Makes sense.", "How did that go?",
               "Take a break, you earned it.", "Let me know if you need help with that.")

_ZH_SUBJECTS = ("我", "哥哥", "妹妹", "邻居", "同事", "小王", "妈妈", "我们组", "孩子们", "朋友", "老板", "奶奶")
_ZH_VERBS = ("聊了", "忘了", "买了", "修好了", "计划了", "看了", "取消了", "订了", "抱怨了", "做完了", "开始了",
             "打扫了", "点了", "问了")
_ZH_THINGS = ("车的事", "花园", "预算报告", "晚饭", "火车票", "打印机", "新手机", "学校的旅行", "厨房", "酒店",
              "机票", "会议", "生日聚会", "体检报告", "健身卡", "房租", "热水器", "密码", "钥匙", "菜谱",
              "保险", "狗粮")
_ZH_TIMES = ("今天早上", "昨天", "上周", "周一", "午饭后", "周末前", "晚上", "今天", "回家路上", "在机场", "在公司")
_ZH_TAILS = ("，挺顺利的。", "，花了好长时间。", "，总算搞定了。", "，跟往常一样。", "，没人注意到。", "，松了一口气。",
             "，好累啊。", "，真是忙碌的一天。")
_ZH_REPLIES = ("听起来事情不少。", "太好了，顺利就好。", "哎呀，真烦人。", "真好！", "要我晚点提醒你吗？", "有道理。",
               "后来怎么样了？", "休息一下吧。", "需要帮忙就说一声。")


def chatter(rng: random.Random, language: str) -> tuple[str, str]:
    """One everyday exchange: (what the user says, what the assistant answers)."""
    if language == "zh":
        said = (f"{rng.choice(_ZH_TIMES)}{rng.choice(_ZH_SUBJECTS)}{rng.choice(_ZH_VERBS)}"
                f"{rng.choice(_ZH_THINGS)}{rng.choice(_ZH_TAILS)}")
        return said, rng.choice(_ZH_REPLIES)
    said = (f"{rng.choice(_EN_SUBJECTS)} {rng.choice(_EN_VERBS)} {rng.choice(_EN_THINGS)} "
            f"{rng.choice(_EN_TIMES)} {rng.choice(_EN_TAILS)}")
    return said, rng.choice(_EN_REPLIES)
